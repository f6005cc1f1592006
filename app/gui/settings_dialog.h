#pragma once
// Project ▸ Settings: the calibration text and window spec, and the evaluation text, context and chunks.
// Returns the edited settings; the caller pushes them as one undo command.
#include <QDialog>

#include "core/project/project.h"

class QLineEdit;
class QSpinBox;

namespace cwb {

class SettingsDialog : public QDialog {
    Q_OBJECT
public:
    SettingsDialog(const ProjectSettings& settings, int64_t modelContext, QWidget* parent = nullptr);
    // Throws cwb::Error when a chosen text file cannot be read.
    ProjectSettings settings() const;

    // A file reference with the file's hash and size (what the project records); {} for an empty path.
    static FileReference reference(const QString& path);

private:
    QLineEdit* fileRow(const QString& path, const QString& what);
    ProjectSettings mOriginal;
    QLineEdit* mCalibration;
    QSpinBox* mSamples;
    QSpinBox* mSeqLen;
    QSpinBox* mSeed;
    QLineEdit* mEvaluation;
    QSpinBox* mCtx;
    QSpinBox* mChunks;
    class QFormLayout* mForm;
};

} // namespace cwb
