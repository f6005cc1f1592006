#include "app/commands/settings_commands.h"

#include <QCoreApplication>

#include "app/commands/change_value.h"
#include "app/gui/project_document.h"

namespace cwb {

QUndoCommand* changeSettings(ProjectDocument* document, const ProjectSettings& settings) {
    auto apply = [document](const ProjectSettings& s) { document->setSettings(s); };
    return new ChangeValue<ProjectSettings>(QCoreApplication::translate("SettingsCommands", "Change project settings"),
                                            CommandId::Unmerged, QStringLiteral("settings"), document->project().settings(),
                                            settings, apply);
}

} // namespace cwb
