#pragma once
// Undo command for the project's calibration and evaluation settings; consecutive edits merge.
#include <QUndoCommand>

#include "core/project/project.h"

namespace cwb {

class ProjectDocument;

QUndoCommand* changeSettings(ProjectDocument* document, const ProjectSettings& settings);

} // namespace cwb
