#include "app/gui/generation_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include <array>
#include <climits>
#include <cmath>

#include "app/gui/background_job.h"
#include "app/gui/compute_device.h"
#include "app/gui/project_document.h"
#include "core/model/model.h"
#include "core/project/project_runner.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"
#include "core/tokenizer/chat_format.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

GenerationPanel::GenerationPanel(QWidget* parent)
    : QWidget(parent), mLeft(new QComboBox(this)), mRight(new QComboBox(this)), mPrompt(new QLineEdit(this)),
      mChat(new QCheckBox(tr("C&hat"), this)), mFormat(new QComboBox(this)), mTokens(new QSpinBox(this)),
      mTemperature(new QDoubleSpinBox(this)), mTopK(new QSpinBox(this)), mSeed(new QSpinBox(this)),
      mGenerate(new QPushButton(tr("&Generate"), this)), mCancel(new QPushButton(tr("Cancel"), this)),
      mProgress(new QProgressBar(this)), mLeftText(new QPlainTextEdit(this)), mRightText(new QPlainTextEdit(this)) {
    mPrompt->setPlaceholderText(tr("Prompt (empty: start from the beginning-of-text token)"));
    mPrompt->setText(QStringLiteral("Once upon a time"));
    mChat->setToolTip(tr("Send the prompt as a user message in a chat format and stop at its end-of-turn token; the "
                         "panes then show the answers alone"));
    mFormat->addItem(tr("model's template"), QString());
    for (const auto& name : chatFormatNames()) mFormat->addItem(QString::fromStdString(name), QString::fromStdString(name));
    mFormat->setToolTip(tr("The chat format: the one the model's chat template writes, or one named (for a model "
                           "without a template, or with one cwb does not recognise)"));
    mTokens->setRange(1, 4096);
    mTokens->setValue(48);
    mTokens->setToolTip(tr("Tokens to generate at most (generation also ends at the end of a text or turn)"));
    mTemperature->setRange(0.0, 5.0);
    mTemperature->setDecimals(2);
    mTemperature->setSingleStep(0.1);
    mTemperature->setSpecialValueText(tr("greedy"));
    mTemperature->setToolTip(tr("Sampling temperature; greedy (0) takes the likeliest token, so both sides are deterministic"));
    mTopK->setRange(0, 1 << 24);
    mTopK->setSpecialValueText(tr("all"));
    mTopK->setToolTip(tr("Sample among the k likeliest tokens (all: the whole vocabulary)"));
    mSeed->setRange(0, INT_MAX);
    mSeed->setToolTip(tr("Seed of the sampling; both sides use it, so their draws differ only where the models do"));
    mLeft->setToolTip(tr("Left pane: the base model or a variant"));
    mRight->setToolTip(tr("Right pane: the base model or a variant"));
    for (QPlainTextEdit* pane : {mLeftText, mRightText}) pane->setReadOnly(true);
    mProgress->setRange(0, 1000);
    mProgress->setVisible(false);
    mCancel->setEnabled(false);

    auto* promptRow = new QHBoxLayout;
    promptRow->addWidget(mPrompt, 1);
    promptRow->addWidget(mChat);
    promptRow->addWidget(mFormat);
    auto* row = new QHBoxLayout;
    const auto labelled = [this, row](const QString& text, QWidget* field) {
        auto* label = new QLabel(text, this);
        label->setBuddy(field);
        row->addWidget(label);
        row->addWidget(field);
    };
    labelled(tr("Tokens:"), mTokens);
    labelled(tr("Temperature:"), mTemperature);
    labelled(tr("Top-k:"), mTopK);
    labelled(tr("Seed:"), mSeed);
    row->addStretch();
    row->addWidget(mGenerate);
    row->addWidget(mProgress);
    row->addWidget(mCancel);
    auto* panes = new QGridLayout;
    panes->addWidget(mLeft, 0, 0);
    panes->addWidget(mRight, 0, 1);
    panes->addWidget(mLeftText, 1, 0);
    panes->addWidget(mRightText, 1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(promptRow);
    layout->addLayout(row);
    layout->addLayout(panes, 1);
    connect(mGenerate, &QPushButton::clicked, this, &GenerationPanel::generate);
    connect(mCancel, &QPushButton::clicked, this, &GenerationPanel::cancel);
    connect(mPrompt, &QLineEdit::returnPressed, this, &GenerationPanel::generate);
    connect(mChat, &QCheckBox::toggled, this, &GenerationPanel::updateControls);
    connect(mTemperature, &QDoubleSpinBox::valueChanged, this, &GenerationPanel::updateControls);
    // A pane's text belongs to the variant that wrote it: another choice clears it (it once stayed under the new name).
    connect(mLeft, &QComboBox::currentTextChanged, mLeftText, &QPlainTextEdit::clear);
    connect(mRight, &QComboBox::currentTextChanged, mRightText, &QPlainTextEdit::clear);
    updateControls();
    setDocument(nullptr);
}

void GenerationPanel::updateControls() {
    mFormat->setEnabled(mChat->isChecked());
    const bool sampled = mTemperature->value() > 0;
    mTopK->setEnabled(sampled);
    mSeed->setEnabled(sampled);
}

GenerationPanel::~GenerationPanel() = default;

void GenerationPanel::setDocument(ProjectDocument* document) {
    if (mJob) mJob.reset();   // cancels and waits: the job reads the old document's model (no finished signal then)
    ++mGeneration;
    mBuilt = {};
    mProgress->setVisible(false);
    mCancel->setEnabled(false);
    mGenerate->setEnabled(true);
    mLeft->setEnabled(true);
    mRight->setEnabled(true);
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    setEnabled(document != nullptr);
    if (document) {
        connect(document, &ProjectDocument::variantsChanged, this, &GenerationPanel::refreshVariants);
        connect(document, &ProjectDocument::modelChanged, this, [this] { mBuilt = {}; });   // built from the old model
    }
    mLeftText->clear();   // the previous project's answers
    mRightText->clear();
    refreshVariants();
}

void GenerationPanel::refreshVariants() {
    for (QComboBox* combo : {mLeft, mRight}) {
        const QString previous = combo->currentText();
        {
            const QSignalBlocker quiet(combo);   // refilled with the same choice: the pane keeps its text
            combo->clear();
            if (mDocument) {
                combo->addItem(QString::fromLatin1(Project::kBaseName));
                for (const auto& v : mDocument->project().variants()) combo->addItem(QString::fromStdString(v.name));
                const bool baseOnBothSides = combo == mRight && previous == QLatin1String(Project::kBaseName) &&
                                             mLeft->currentText() == QLatin1String(Project::kBaseName);
                // B was base only while there was nothing else: the first variant added goes there (the first
                // generation compared base with base, GUI probe).
                if (combo->findText(previous) >= 0 && !(baseOnBothSides && combo->count() > 1)) combo->setCurrentText(previous);
                else if (combo == mRight && combo->count() > 1) combo->setCurrentIndex(combo->count() - 1);
            }
        }
        if (combo->currentText() != previous) (combo == mLeft ? mLeftText : mRightText)->clear();
    }
}

QString GenerationPanel::leftVariant() const { return mLeft->currentText(); }
QString GenerationPanel::rightVariant() const { return mRight->currentText(); }
void GenerationPanel::setPrompt(const QString& prompt) { mPrompt->setText(prompt); }
void GenerationPanel::setTokens(int tokens) { mTokens->setValue(tokens); }
void GenerationPanel::setChat(bool on) { mChat->setChecked(on); }
bool GenerationPanel::setChatFormat(const QString& name) {
    const int index = mFormat->findData(name);
    if (index < 0) return false;
    mFormat->setCurrentIndex(index);
    return true;
}
void GenerationPanel::setSampling(double temperature, int topK, int seed) {
    mTemperature->setValue(temperature);
    mTopK->setValue(topK);
    mSeed->setValue(seed);
}
bool GenerationPanel::isGenerating() const { return mJob && mJob->isRunning(); }
void GenerationPanel::cancel() {
    if (mJob) mJob->cancel();
}
QString GenerationPanel::leftText() const { return mLeftText->toPlainText(); }
QString GenerationPanel::rightText() const { return mRightText->toPlainText(); }

bool GenerationPanel::setVariants(const QString& left, const QString& right) {
    if (mLeft->findText(left) < 0 || mRight->findText(right) < 0) return false;
    mLeft->setCurrentText(left);
    mRight->setCurrentText(right);
    return true;
}

std::string GenerationPanel::buildKey(const std::string& variant) const {
    try {
        const Project& project = mDocument->project();
        const ProjectSettings& s = project.settings();
        const nlohmann::json key = {{"steps", ProjectRunner(project, *mDocument->model()).fullRecipe(variant).toJson()},
                                    {"calibration", {s.calibration.path, s.calibration.hash, s.calibrationSamples,
                                                     s.calibrationSeqLen, s.calibrationSeed}}};
        return key.dump();
    } catch (const std::exception&) {
        return "";
    }
}

bool GenerationPanel::generate() {
    if (!mDocument || isGenerating()) return false;
    std::shared_ptr<const Model> model = mDocument->model();
    if (!model->tokenizer) {
        mLastError = tr("The model has no tokenizer, so it cannot generate text. Give it one with Project ▸ Use Tokenizer File.");
        mLeftText->setPlainText(mLastError);
        return false;
    }
    const Project snapshot = mDocument->project();   // the worker reads a copy; editing goes on meanwhile
    const std::array<std::string, 2> names = {mLeft->currentText().toStdString(), mRight->currentText().toStdString()};
    GenerateParams params;
    params.prompt = mPrompt->text().toStdString();
    params.addBos = model->tokenizer->addBosByDefault();   // as the model's own tokenizer starts a text
    params.tokens = mTokens->value();
    params.temperature = mTemperature->value();
    params.topK = mTopK->value();
    params.seed = uint64_t(mSeed->value());
    const bool chat = mChat->isChecked();
    QString notes;   // chat warnings, shown above the answers
    if (chat) {
        try {
            const ChatFormat format = chatFormatFromName(mFormat->currentData().toString().toStdString());
            const ChatPrompt prompt = prepareChatPrompt(*model->tokenizer, {{"user", params.prompt}}, format);
            params.prompt = prompt.text;
            params.parseSpecial = true;
            params.addBos = model->tokenizer->addBosByDefault();
            params.stopIds = prompt.stopIds;
            for (const auto& w : prompt.warnings) notes += tr("Warning: %1\n\n").arg(QString::fromStdString(w));
        } catch (const Error& e) {
            mLastError = tr("Chat: %1").arg(QString::fromStdString(e.what()));
            if (mFormat->currentData().toString().isEmpty()) mLastError += tr("\n\nName a chat format in the box beside Chat.");
            mLeftText->setPlainText(mLastError);
            mRightText->clear();
            return false;
        }
    }
    // Variants kept from the last Generate when nothing they were built from changed; the rest are built (once for
    // both sides when they name the same one).
    auto built = std::make_shared<std::array<BuiltVariant, 2>>();
    for (size_t side = 0; side < 2; ++side) {
        if (names[side] == Project::kBaseName) continue;
        const std::string key = buildKey(names[side]);
        (*built)[side].key = key;
        (*built)[side].base = model;
        for (const BuiltVariant& kept : mBuilt)
            if (!key.empty() && kept.key == key && kept.base == model && kept.model) (*built)[side].model = kept.model;
    }
    auto buildCount = std::make_shared<int>(0);
    const QString shown = chat ? notes : mPrompt->text();   // what goes before each answer
    const unsigned generation = ++mGeneration;
    QPointer<GenerationPanel> self(this);
    const RuntimeOptions options = guiRuntimeOptions();   // Run ▸ Compute On
    mJob = std::make_unique<BackgroundJob>(tr("Generate"), [snapshot, model, names, params, built, buildCount, options, self,
                                                            generation, shown](Feedback& feedback) {
        ProjectRunner runner(snapshot, *model, options);
        for (size_t side = 0; side < 2; ++side) {
            BuiltVariant& mine = (*built)[side];
            const bool building = names[side] != Project::kBaseName && !mine.model;
            const double buildShare = building ? 0.35 : 0.0;
            SubFeedback build(&feedback, side * 0.5, side * 0.5 + buildShare), decode(&feedback, side * 0.5 + buildShare, side * 0.5 + 0.5);
            if (building && side == 1 && names[1] == names[0]) mine.model = (*built)[0].model;
            if (building && !mine.model) {
                feedback.log("building " + names[side]);
                mine.model = runner.build(names[side], &build);
                ++*buildCount;
            }
            GenerateParams streamed = params;
            streamed.onText = [self, generation, side, shown](const std::string& text) {
                QMetaObject::invokeMethod(self, [self, generation, side, shown, text] {
                    if (self && self->mGeneration == generation)
                        (side == 0 ? self->mLeftText : self->mRightText)->setPlainText(shown + QString::fromStdString(text));
                }, Qt::QueuedConnection);
            };
            feedback.log("generating with " + names[side]);
            Transformer runtime(mine.model ? *mine.model : *model, options);
            cwb::generate(runtime, *model->tokenizer, streamed, &decode);
        }
    });
    connect(mJob.get(), &BackgroundJob::progressChanged, this, [this](double f) { mProgress->setValue(int(std::lround(f * 1000))); });
    connect(mJob.get(), &BackgroundJob::logged, this, [this](const QString& line) {
        // Which part of the work the bar is in: building a variant is most of it, and once stood at 84% unexplained.
        if (line.startsWith(QStringLiteral("building "))) mProgress->setFormat(tr("Building %1… %p%").arg(line.mid(9)));
        else if (line.startsWith(QStringLiteral("generating with "))) mProgress->setFormat(tr("%1: %p%").arg(line.mid(16)));
    });
    connect(mJob.get(), &BackgroundJob::finished, this, [this, built, buildCount](bool cancelled, const QString& error) {
        mProgress->setVisible(false);
        mProgress->setFormat(QStringLiteral("%p%"));
        mCancel->setEnabled(false);
        mGenerate->setEnabled(true);
        mLeft->setEnabled(true);
        mRight->setEnabled(true);
        mLastBuildCount = *buildCount;
        for (size_t side = 0; side < 2; ++side)   // kept even when cancelled: built is built
            if ((*built)[side].model) mBuilt[side] = (*built)[side];
        ++mGeneration;   // text still queued from the worker is older than what follows
        const bool ok = !cancelled && error.isEmpty();
        if (!ok) {
            mLastError = cancelled ? tr("Cancelled.") : tr("Generation failed: %1").arg(error);
            // What had come before a cancel stays, marked; an error replaces it.
            if (cancelled && !mLeftText->toPlainText().isEmpty()) {
                for (QPlainTextEdit* pane : {mLeftText, mRightText})
                    if (!pane->toPlainText().isEmpty()) pane->appendPlainText(tr("\n[cancelled]"));
            } else {
                mLeftText->setPlainText(mLastError);
                mRightText->clear();
            }
        }
        emit generationFinished(ok);
    });
    mLeftText->clear();
    mRightText->clear();
    mProgress->setValue(0);
    mProgress->setVisible(true);
    mCancel->setEnabled(true);
    mGenerate->setEnabled(false);
    // The answers go under the names they were asked of: the choices stay put until they are in (review).
    mLeft->setEnabled(false);
    mRight->setEnabled(false);
    emit generationStarted(mJob->title());
    mJob->start();
    return true;
}

} // namespace cwb
