#include "app/gui/export_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>

#include "app/gui/background_job.h"
#include "core/compress/recipe.h"
#include "core/export/export_format.h"
#include "core/export/export_plan.h"
#include "core/project/project.h"
#include "core/project/project_runner.h"
#include "core/util/error.h"

namespace cwb {

namespace {

QStringList typesFor(const QString& format) {
    if (format == "gguf") return {"", "f16", "bf16", "f32", "q8_0", "q6_K", "q5_K", "q5_1", "q5_0", "q4_K", "q4_1", "q4_0"};
    return {"", "f16", "bf16", "f32"};
}

} // namespace

ExportDialog::ExportDialog(const Project& project, const QString& currentVariant, std::shared_ptr<const Model> base,
                           QWidget* parent)
    : QDialog(parent), mBase(std::move(base)) {
    if (mBase) {
        ProjectRunner runner(project, *mBase);
        mRecipes[QString::fromLatin1(Project::kBaseName)] = std::make_shared<Recipe>();
        for (const auto& v : project.variants()) {
            try {
                mRecipes[QString::fromStdString(v.name)] = std::make_shared<Recipe>(runner.fullRecipe(v.name));
            } catch (const Error&) {
                // A recipe this build cannot read fails with its reason when the job builds it.
            }
        }
    }
    setWindowTitle(tr("Export Variant"));
    mVariant = new QComboBox(this);
    mVariant->addItem(QString::fromLatin1(Project::kBaseName));
    for (const auto& v : project.variants()) mVariant->addItem(QString::fromStdString(v.name));
    if (!currentVariant.isEmpty()) mVariant->setCurrentText(currentVariant);
    mFormat = new QComboBox(this);
    for (const ExportFormat* f : ExportFormatRegistry::instance().formats())
        mFormat->addItem(QString::fromStdString(f->displayName()), QString::fromStdString(f->id()));
    mType = new QComboBox(this);
    mType->setToolTip(tr("Type of the tensors the recipe left unquantized; empty: the format's default (f16, or bf16 for a model read as bf16; GPTQ and AWQ f16). "
                         "GGUF maps quantized layers to the nearest ggml type and reports any error it adds."));
    mRequantize = new QComboBox(this);
    mRequantize->setToolTip(tr("GGUF: the type of compressed layers that cannot be written level for level (act-order, "
                               "input scales, groups that are not whole blocks of 32). Nearest: the ggml type closest "
                               "to each layer's format; f32 keeps their exact weights."));
    for (const QString& t : typesFor("gguf")) mRequantize->addItem(t.isEmpty() ? tr("(nearest)") : t, t);
    mPackHead = new QCheckBox(tr("Pack a quantized output head (GPTQModel, vLLM)"), this);
    mPackHead->setToolTip(tr("GPTQ: an lm_head quantized on the block layers' grid (same bits and group size) is packed "
                             "beside them, with \"lm_head\": true in quantization_config, as GPTQModel writes it. Off: it is "
                             "written dequantized, since transformers' GPTQ loader converts the block layers only."));
    mPath = new QLineEdit(this);
    auto* browseButton = new QPushButton(tr("Browse…"), this);
    auto* pathRow = new QHBoxLayout;
    pathRow->addWidget(mPath);
    pathRow->addWidget(browseButton);
    auto* form = new QFormLayout;
    form->addRow(tr("Variant"), mVariant);
    form->addRow(tr("Format"), mFormat);
    form->addRow(tr("Tensor type"), mType);
    form->addRow(tr("Re-quantized layers"), mRequantize);
    form->addRow(tr("Output head"), mPackHead);
    form->addRow(tr("Write to"), pathRow);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Export"));
    mProblem = new QLabel(this);   // why the destination cannot take the export, before anything is built
    mProblem->setWordWrap(true);
    mProblem->setStyleSheet(QStringLiteral("color: #b00020"));
    mWhere = new QLabel(this);
    mWhere->setWordWrap(true);
    mWhere->setVisible(false);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(mWhere);
    layout->addWidget(mProblem);
    layout->addWidget(buttons);
    connect(mFormat, &QComboBox::currentIndexChanged, this, &ExportDialog::formatChanged);
    connect(browseButton, &QPushButton::clicked, this, &ExportDialog::browse);
    connect(mPath, &QLineEdit::textChanged, this, &ExportDialog::validate);
    connect(buttons, &QDialogButtonBox::accepted, this, &ExportDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    mOk = buttons->button(QDialogButtonBox::Ok);
    connect(mType, &QComboBox::currentIndexChanged, this, &ExportDialog::validate);
    connect(mRequantize, &QComboBox::currentIndexChanged, this, &ExportDialog::validate);
    connect(mPackHead, &QCheckBox::toggled, this, &ExportDialog::validate);
    connect(mVariant, &QComboBox::currentIndexChanged, this, &ExportDialog::validate);
    formatChanged();
}

void ExportDialog::formatChanged() {
    mType->clear();
    for (const QString& t : typesFor(mFormat->currentData().toString())) mType->addItem(t.isEmpty() ? tr("(default)") : t, t);
    const bool gguf = mFormat->currentData().toString() == "gguf";
    mRequantize->setEnabled(gguf);   // the other formats write compressed layers in their own layouts
    if (!gguf) mRequantize->setCurrentIndex(0);
    const bool gptq = mFormat->currentData().toString() == "gptq";
    mPackHead->setEnabled(gptq);   // no other layout has a place for a packed head (GGUF keeps it quantized anyway)
    if (!gptq) mPackHead->setChecked(false);
    validate();
}

void ExportDialog::browse() {
    const QString format = mFormat->currentData().toString();
    if (format == "gguf") {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export to GGUF file"), mPath->text(), tr("GGUF (*.gguf)"));
        if (!path.isEmpty()) mPath->setText(path);
        return;
    }
    // A folder format: a save dialog could not pick an existing folder (GUI probe). The folder chosen is the export
    // itself when it is empty or holds an earlier export; otherwise a new folder inside it, named after the variant.
    const QString start = mPath->text().isEmpty() ? QString() : QFileInfo(mPath->text()).absolutePath();
    const QString folder = QFileDialog::getExistingDirectory(this, tr("Export to folder (an empty one, an earlier export, or one to create it in)"), start);
    if (folder.isEmpty()) return;
    const bool usable = QDir(folder).isEmpty() || exportDestinationProblem(format.toStdString(), folder.toStdString()).empty();
    mPath->setText(usable ? folder : QDir(folder).filePath(mVariant->currentText() + "-" + format));
}

QString ExportDialog::replaceQuestion() const {
    const QString path = request().path;
    const QFileInfo info(path);
    if (path.isEmpty() || !info.exists()) return {};
    if (info.isDir() && QDir(path).isEmpty()) return {};
    return info.isDir() ? tr("The folder %1 holds an earlier export. Replace it with this one?").arg(path)
                        : tr("The file %1 exists. Replace it with this export?").arg(path);
}

void ExportDialog::accept() {
    validate();
    if (!mOk->isEnabled()) return;
    const QString question = replaceQuestion();
    if (mInteractive && !question.isEmpty() &&
        QMessageBox::question(this, tr("Replace?"), question, QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel) != QMessageBox::Yes)
        return;
    QDialog::accept();
}

void ExportDialog::validate() {
    const QString path = mPath->text().trimmed();
    ExportOptions options;
    options.tensorType = mType->currentData().toString().toStdString();
    if (mRequantize->isEnabled()) options.requantizeType = mRequantize->currentData().toString().toStdString();
    options.packHead = mPackHead->isChecked();
    const std::string format = mFormat->currentData().toString().toStdString();
    // What the format cannot hold is said as soon as the format is chosen, before a path is typed (GUI probe).
    std::string why = exportOptionsProblem(format, options);
    const auto recipe = mRecipes.find(mVariant->currentText());
    if (why.empty() && mBase && recipe != mRecipes.end()) {
        why = exportRecipeProblem(*mBase, *recipe->second, format);
        if (!why.empty()) why = "the variant cannot be written as " + format + ": " + why;
    }
    if (why.empty() && !path.isEmpty()) {
        // The core words it to follow the path, as the CLI prints it; alone it had no subject (GUI probe).
        why = mBase ? exportOverwritesSource(path.toStdString(), mBase->path) : std::string();
        if (!why.empty()) why = "This path " + why;
        if (why.empty()) {
            why = exportDestinationProblem(format, path.toStdString());
            if (why.rfind("exists", 0) == 0 || why.rfind("is a ", 0) == 0) why = "This path " + why;   // no subject (GUI probe)
        }
    }
    const QString problem = QString::fromStdString(why);
    const bool relative = !path.isEmpty() && QFileInfo(path).isRelative();
    mWhere->setText(relative ? tr("Writes to %1").arg(QFileInfo(path).absoluteFilePath()) : QString());
    const bool shownBefore = mProblem->isVisibleTo(this) || mWhere->isVisibleTo(this);
    mWhere->setVisible(relative);
    mProblem->setText(problem);
    mProblem->setVisible(!problem.isEmpty());
    // Back to its height once the lines go: it kept the grown height, and Export stayed a line lower (GUI probe).
    if (shownBefore && !mProblem->isVisibleTo(this) && !mWhere->isVisibleTo(this)) {
        layout()->activate();
        resize(width(), sizeHint().height());
    }
    mOk->setEnabled(!path.isEmpty() && problem.isEmpty());
}

QString ExportDialog::problem() const { return mProblem->text(); }

ExportRequest ExportDialog::request() const {
    const QString path = mPath->text().trimmed();
    return {mVariant->currentText(), mFormat->currentData().toString(), mType->currentData().toString(),
            path.isEmpty() ? path : QFileInfo(path).absoluteFilePath(),
            mRequantize->isEnabled() ? mRequantize->currentData().toString() : QString(), mPackHead->isChecked()};
}

void ExportDialog::setRequest(const ExportRequest& r) {
    mVariant->setCurrentText(r.variant);
    mFormat->setCurrentIndex(mFormat->findData(r.format));
    mType->setCurrentIndex(std::max(0, mType->findData(r.type)));
    mRequantize->setCurrentIndex(mRequantize->isEnabled() ? std::max(0, mRequantize->findData(r.requantize)) : 0);
    mPackHead->setChecked(mPackHead->isEnabled() && r.packHead);
    mPath->setText(r.path);
}

std::unique_ptr<BackgroundJob> makeExportJob(const Project& snapshot, std::shared_ptr<const Model> base,
                                             const ExportRequest& request, std::shared_ptr<ExportOutcome> outcome,
                                             QObject* parent) {
    const QString title = QObject::tr("Export %1 as %2").arg(request.variant, request.format);
    return std::make_unique<BackgroundJob>(title, [snapshot, base, request, outcome](Feedback& feedback) {
        // A destination the export cannot use fails now, not after the variant is built.
        std::string where = exportOverwritesSource(request.path.toStdString(), base->path);
        if (where.empty()) where = exportDestinationProblem(request.format.toStdString(), request.path.toStdString());
        if (!where.empty()) throw Error(request.path.toStdString(), where);
        std::unique_ptr<Model> variant;
        Recipe recipe;
        if (request.variant != Project::kBaseName) {
            // So is a layout that cannot hold what the recipe makes.
            recipe = ProjectRunner(snapshot, *base).fullRecipe(request.variant.toStdString());
            const std::string why = exportRecipeProblem(*base, recipe, request.format.toStdString());
            if (!why.empty()) throw Error(request.variant.toStdString() + " cannot be written as " + request.format.toStdString() + ": " + why);
        }
        SubFeedback building(&feedback, 0.0, 0.6), writing(&feedback, 0.6, 1.0);
        if (request.variant == Project::kBaseName) {
            variant = base->clone();
        } else {
            ProjectRunner runner(snapshot, *base);
            feedback.log("building " + request.variant.toStdString());
            variant = runner.build(request.variant.toStdString(), &building);
        }
        ExportOptions options;
        options.tensorType = request.type.toStdString();
        options.requantizeType = request.requantize.toStdString();
        options.packHead = request.packHead;
        const ExportReport report = exportModel(*variant, request.format.toStdString(), request.path.toStdString(), options, &writing);
        outcome->lines.append(QObject::tr("Wrote %1 (%2 tensor bytes).").arg(QString::fromStdString(report.path)).arg(report.bytes));
        for (const auto& warning : report.warnings) outcome->lines.append(QObject::tr("Warning: %1").arg(QString::fromStdString(warning)));
        for (const auto& note : report.notes) outcome->lines.append(QString::fromStdString(note));
        // The recipe as built, which later edits of the variant do not change.
        outcome->journal = {{"variant", request.variant.toStdString()}, {"format", report.format}, {"path", report.path},
                            {"files", report.files}, {"bytes", report.bytes}, {"warnings", report.warnings.size()}};
        if (!options.tensorType.empty()) outcome->journal["type"] = options.tensorType;
        if (!options.requantizeType.empty()) outcome->journal["requantize"] = options.requantizeType;
        if (options.packHead) outcome->journal["pack_head"] = true;
        if (request.variant != Project::kBaseName) outcome->journal["recipe"] = recipe.toJson();
    }, parent);
}

} // namespace cwb
