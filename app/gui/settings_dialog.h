#pragma once
// Project ▸ Settings: the calibration text and window spec, and the evaluation text, context and chunks.
// Returns the edited settings; the caller pushes them as one undo command.
#include <QDialog>

#include <optional>

#include "core/project/project.h"

class QLineEdit;
class QSpinBox;

namespace cwb {

class SettingsDialog : public QDialog {
    Q_OBJECT
public:
    SettingsDialog(const ProjectSettings& settings, int64_t modelContext, QWidget* parent = nullptr);
    // The edited settings. OK is refused, with the reason, while a chosen text file cannot be read or the seed is not
    // a number, so the dialog stays open with the edits; after OK this returns what was checked. Before, it reads
    // the fields and throws cwb::Error as OK would refuse.
    ProjectSettings settings() const;
    void accept() override;
    QString problem() const;   // why OK was last refused ("" when it was not)
    // For tests: the fields as a user would type them.
    void setCalibrationPath(const QString& path);
    void setSeedText(const QString& text);

    // A file reference with the file's hash and size (what the project records); {} for an empty path.
    static FileReference reference(const QString& path);

private:
    // While a field is edited: a problem shown for the last OK goes (it stayed after the path was fixed), and a number
    // out of its range is named (0 windows showed 0, and OK quietly kept 128, GUI probe).
    void fieldEdited();
    QLineEdit* fileRow(const QString& path, const QString& what);
    ProjectSettings mOriginal;
    QLineEdit* mCalibration;
    QSpinBox* mSamples;
    QSpinBox* mSeqLen;
    QLineEdit* mSeed;   // 64-bit: a spin box holds int only, and changed larger seeds silently
    QLineEdit* mEvaluation;
    QSpinBox* mCtx;
    QSpinBox* mChunks;
    class QFormLayout* mForm;
    class QLabel* mProblem = nullptr;
    class QLabel* mTextsChanged = nullptr;   // a text edited on disk since the project recorded it
    std::optional<ProjectSettings> mAccepted;
    ProjectSettings read() const;
};

} // namespace cwb
