#pragma once
// File ▸ Export Variant: choose a variant, a format from the core's export registry, a tensor type and where to
// write. The export itself runs as an ExportJob so the window stays responsive and can cancel it.
#include <QDialog>

#include <map>
#include <memory>

#include <nlohmann/json.hpp>

class QCheckBox;
class QComboBox;
class QLineEdit;

namespace cwb {

class BackgroundJob;
class Model;
class Project;
struct Recipe;

struct ExportRequest {
    QString variant;   // "base" or a variant name
    QString format;    // "hf", "gptq", "awq", "gguf"
    QString type;      // "" for the format's default
    QString path;      // folder (hf/gptq/awq) or .gguf file
    QString requantize;   // gguf: type of layers that cannot be written level for level; "" the nearest
    bool packHead = false;   // gptq: a quantized head on the blocks' grid packed beside them (ExportOptions::packHead)
};

class ExportDialog : public QDialog {
    Q_OBJECT
public:
    // With `base` (the project's model), a format that cannot hold what the chosen variant's recipe makes is said
    // before anything is built (exportRecipeProblem).
    ExportDialog(const Project& project, const QString& currentVariant, std::shared_ptr<const Model> base = nullptr,
                 QWidget* parent = nullptr);
    // The path is made absolute (a relative one is of the app's working folder, which the dialog shows).
    ExportRequest request() const;
    void setRequest(const ExportRequest& request);   // for tests and scripts
    // Why the chosen variant, format, destination or type cannot make the export ("" when they can); the dialog
    // shows it and keeps Export disabled.
    QString problem() const;
    // Asks before an existing file or folder is replaced (Export); `interactive` false only for tests.
    void accept() override;
    void setInteractive(bool interactive) { mInteractive = interactive; }
    // What accept() would ask, "" when nothing exists at the destination.
    QString replaceQuestion() const;

private:
    void formatChanged();
    void browse();
    void validate();

    QComboBox* mVariant;
    QComboBox* mFormat;
    QComboBox* mType;
    QComboBox* mRequantize;   // GGUF only
    QCheckBox* mPackHead;     // GPTQ only
    QLineEdit* mPath;
    class QPushButton* mOk = nullptr;
    class QLabel* mProblem = nullptr;
    class QLabel* mWhere = nullptr;   // the absolute destination, for a relative path
    bool mInteractive = true;
    std::shared_ptr<const Model> mBase;
    std::map<QString, std::shared_ptr<const Recipe>> mRecipes;   // each variant's whole recipe (base → … → it)
};

// What a successful export job leaves for the GUI thread.
struct ExportOutcome {
    QStringList lines;          // the exporter's report
    nlohmann::json journal;     // the project history's "export" entry: the request, the whole recipe, files and bytes
};

// Builds the variant from the project snapshot (or takes the base) and exports it on a worker thread. The job's
// finished(cancelled, error) tells the outcome; `outcome` is filled after success.
std::unique_ptr<BackgroundJob> makeExportJob(const Project& snapshot, std::shared_ptr<const Model> base,
                                             const ExportRequest& request, std::shared_ptr<ExportOutcome> outcome,
                                             QObject* parent = nullptr);

} // namespace cwb
