#include "app/gui/settings_dialog.h"

#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>

#include "core/project/file_hash.h"
#include "core/util/error.h"

namespace cwb {

namespace {

// A number past the maximum stays as typed (not valid, so the dialog says the range) instead of losing its last digit:
// 4096 typed where 2048 is the most became 409 without a word (GUI probe). Leaving the field sets the nearest.
class RangeSpinBox : public QSpinBox {
public:
    using QSpinBox::QSpinBox;
    QValidator::State validate(QString& text, int& pos) const override {
        const QValidator::State state = QSpinBox::validate(text, pos);
        bool number = false;
        text.trimmed().toLongLong(&number);
        return state == QValidator::Invalid && number ? QValidator::Intermediate : state;
    }
    void fixup(QString& input) const override {   // the nearest allowed value, not the minimum
        bool number = false;
        const qlonglong typed = input.trimmed().toLongLong(&number);
        if (number) input = textFromValue(int(std::clamp<qlonglong>(typed, minimum(), maximum())));
        else QSpinBox::fixup(input);
    }
};

// The seed as a whole number 0 .. 2^64 - 1 ("" when it is one): letters typed were dropped without a word.
QString seedProblem(const QString& text) {
    bool ok = false;
    text.trimmed().toULongLong(&ok);
    return ok && !text.trimmed().startsWith('+') ? QString()
                                                 : SettingsDialog::tr("Seed takes a whole number from 0 to 18446744073709551615");
}

} // namespace

SettingsDialog::SettingsDialog(const ProjectSettings& s, int64_t modelContext, QWidget* parent)
    : QDialog(parent), mOriginal(s), mSamples(new RangeSpinBox(this)), mSeqLen(new RangeSpinBox(this)), mSeed(new QLineEdit(this)),
      mCtx(new RangeSpinBox(this)), mChunks(new RangeSpinBox(this)), mForm(new QFormLayout) {
    setWindowTitle(tr("Project Settings"));
    mCalibration = fileRow(QString::fromStdString(s.calibration.path), tr("Calibration text"));
    mCalibration->setToolTip(tr("Plain text the calibrated methods (GPTQ, AWQ, Wanda, …) draw token windows from"));
    mSamples->setRange(int(kLeastCalibrationSamples), int(kMostCalibrationSamples));
    mSamples->setValue(int(s.calibrationSamples));
    mSamples->setToolTip(tr("calibration windows"));
    mForm->addRow(tr("Windows"), mSamples);
    mSeqLen->setRange(int(kLeastCalibrationSeqLen), int(modelContext));
    mSeqLen->setValue(int(std::min<int64_t>(s.calibrationSeqLen, modelContext)));
    mSeqLen->setToolTip(tr("tokens per calibration window (at most the model's context)"));
    mForm->addRow(tr("Tokens per window"), mSeqLen);
    mSeed->setText(QString::number(static_cast<qulonglong>(s.calibrationSeed)));
    mSeed->setToolTip(tr("seeds the calibration windows' offsets (0 … 2^64 − 1)"));
    mForm->addRow(tr("Seed"), mSeed);
    mEvaluation = fileRow(QString::fromStdString(s.evaluation.path), tr("Evaluation text"));
    mEvaluation->setToolTip(tr("Plain text perplexity, KL and top-1 are measured on"));
    mCtx->setRange(int(kLeastEvalCtx), int(modelContext));
    mCtx->setValue(int(std::min<int64_t>(s.evalCtx, modelContext)));
    mCtx->setToolTip(tr("tokens per evaluation chunk (at most the model's context)"));
    mForm->addRow(tr("Context"), mCtx);
    mChunks->setRange(-1, 1000000);
    mChunks->setValue(int(s.evalChunks));
    mChunks->setSpecialValueText(tr("all"));
    mChunks->setToolTip(tr("evaluation chunks to use; 'all' (-1) uses the whole text"));
    mForm->addRow(tr("Chunks"), mChunks);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(mForm);
    mProblem = new QLabel(this);   // why OK was refused
    mProblem->setWordWrap(true);
    mProblem->setStyleSheet(QStringLiteral("color: #b00020"));
    mProblem->setVisible(false);
    layout->addWidget(mProblem);
    const TextHashes onDisk = textHashesOnDisk(s);
    QStringList changed;
    if (onDisk.evaluation != s.evaluation.hash) changed << tr("the evaluation text");
    if (onDisk.calibration != s.calibration.hash) changed << tr("the calibration text");
    if (!changed.isEmpty()) {
        mTextsChanged = new QLabel(tr("%1 changed on disk since the project recorded it; OK records it as it is now.")
                                       .arg(changed.join(tr(" and "))), this);
        mTextsChanged->setWordWrap(true);
        layout->addWidget(mTextsChanged);
    }
    layout->addWidget(buttons);
    for (QSpinBox* box : {mSamples, mSeqLen, mCtx, mChunks}) {
        box->setCorrectionMode(QAbstractSpinBox::CorrectToNearestValue);
        // The box's own line edit: QSpinBox::textChanged comes only with a new value, not with "0" typed below the range.
        if (auto* line = box->findChild<QLineEdit*>()) connect(line, &QLineEdit::textChanged, this, &SettingsDialog::fieldEdited);
        connect(box, &QSpinBox::editingFinished, this, &SettingsDialog::fieldEdited);   // set to the nearest: said no more
    }
    for (QLineEdit* line : {mCalibration, mEvaluation, mSeed}) connect(line, &QLineEdit::textEdited, this, &SettingsDialog::fieldEdited);
}

void SettingsDialog::fieldEdited() {
    QStringList outOfRange;
    for (QSpinBox* box : {mSamples, mSeqLen, mCtx, mChunks})
        if (!box->hasAcceptableInput()) {
            const auto* label = qobject_cast<QLabel*>(mForm->labelForField(box));
            outOfRange << tr("%1 takes %2 to %3; leaving the field sets the nearest")
                              .arg(label ? label->text() : box->toolTip())
                              .arg(box->minimum())
                              .arg(box->maximum());
        }
    if (const QString seed = seedProblem(mSeed->text()); !seed.isEmpty()) outOfRange << seed;
    mProblem->setText(outOfRange.join('\n'));
    mProblem->setVisible(!outOfRange.isEmpty());
}

QLineEdit* SettingsDialog::fileRow(const QString& path, const QString& what) {
    auto* line = new QLineEdit(path, this);
    line->setPlaceholderText(tr("(none)"));
    // Room for a path: the dialog opened at its narrowest, which showed some 20 characters of one (GUI probe).
    const QFontMetrics metrics = line->fontMetrics();
    line->setMinimumWidth(std::clamp(metrics.horizontalAdvance(path) + 16, metrics.averageCharWidth() * 60, metrics.averageCharWidth() * 80));
    auto* browse = new QPushButton(tr("Browse…"), this);
    connect(browse, &QPushButton::clicked, this, [this, line, what] {
        const QString chosen = QFileDialog::getOpenFileName(this, what, QFileInfo(line->text()).absolutePath(),
                                                            tr("Text files (*.txt *.raw);;All files (*)"));
        if (!chosen.isEmpty()) line->setText(chosen);
    });
    auto* row = new QHBoxLayout;
    row->addWidget(line, 1);
    row->addWidget(browse);
    mForm->addRow(what, row);
    return line;
}

FileReference SettingsDialog::reference(const QString& path) {
    if (path.isEmpty()) return {};
    // An empty text is refused here, as the CLI refuses it, not after a run has built its variant (GUI probe).
    return textFileReference(QFileInfo(path).absoluteFilePath().toStdString());
}

void SettingsDialog::accept() {
    try {
        mAccepted = read();
    } catch (const std::exception& e) {
        mProblem->setText(QString::fromStdString(errorText(e)));
        mProblem->setVisible(true);
        return;   // the dialog stays open with the user's edits
    }
    QDialog::accept();
}

ProjectSettings SettingsDialog::settings() const { return mAccepted ? *mAccepted : read(); }

QString SettingsDialog::problem() const { return mProblem->text(); }
void SettingsDialog::setCalibrationPath(const QString& path) { mCalibration->setText(path); }
void SettingsDialog::setSeedText(const QString& text) { mSeed->setText(text); }

ProjectSettings SettingsDialog::read() const {
    ProjectSettings s = mOriginal;
    // The same file keeps its reference unless its content changed on disk since it was recorded: OK records it again.
    auto keepOrHash = [](const FileReference& old, const QString& path) {
        const bool same = QFileInfo(path).absoluteFilePath().toStdString() == old.path && !old.path.empty();
        if (!same) return reference(path);
        if (!QFileInfo(path).isFile()) return old;   // gone: kept as recorded; a run says it is missing
        try {
            const FileReference now = reference(path);
            return now.hash == old.hash ? old : now;
        } catch (const Error&) {
            return old;   // unreadable now: as recorded, as textHashesOnDisk takes it
        }
    };
    s.calibration = keepOrHash(mOriginal.calibration, mCalibration->text().trimmed());
    s.evaluation = keepOrHash(mOriginal.evaluation, mEvaluation->text().trimmed());
    s.calibrationSamples = mSamples->value();
    s.calibrationSeqLen = mSeqLen->value();
    bool ok = false;
    const qulonglong seed = mSeed->text().trimmed().toULongLong(&ok);
    if (!ok) throw Error("the seed must be a whole number from 0 to 18446744073709551615, got '" + mSeed->text().toStdString() + "'");
    s.calibrationSeed = uint64_t(seed);
    s.evalCtx = mCtx->value();
    s.evalChunks = mChunks->value() == 0 ? -1 : mChunks->value();
    return s;
}

} // namespace cwb
