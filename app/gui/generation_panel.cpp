#include "app/gui/generation_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include <array>
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
      mChat(new QCheckBox(tr("C&hat"), this)), mTokens(new QSpinBox(this)), mGenerate(new QPushButton(tr("&Generate"), this)), mCancel(new QPushButton(tr("Cancel"), this)),
      mProgress(new QProgressBar(this)), mLeftText(new QPlainTextEdit(this)), mRightText(new QPlainTextEdit(this)) {
    mPrompt->setPlaceholderText(tr("Prompt (empty: start from the beginning-of-text token)"));
    mPrompt->setText(QStringLiteral("Once upon a time"));
    mChat->setToolTip(tr("Send the prompt as a user message in the model's chat format (read from its chat template) "
                         "and stop at its end-of-turn token; the panes then show the answers alone"));
    mTokens->setRange(1, 4096);
    mTokens->setValue(48);
    mTokens->setToolTip(tr("Tokens to generate (greedy decoding, so both sides are deterministic)"));
    mLeft->setToolTip(tr("Left pane: the base model or a variant"));
    mRight->setToolTip(tr("Right pane: the base model or a variant"));
    for (QPlainTextEdit* pane : {mLeftText, mRightText}) pane->setReadOnly(true);
    mProgress->setRange(0, 1000);
    mProgress->setVisible(false);
    mCancel->setEnabled(false);

    auto* row = new QHBoxLayout;
    row->addWidget(mPrompt, 1);
    row->addWidget(mChat);
    row->addWidget(new QLabel(tr("Tokens:"), this));
    row->addWidget(mTokens);
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
    layout->addLayout(row);
    layout->addLayout(panes, 1);
    connect(mGenerate, &QPushButton::clicked, this, &GenerationPanel::generate);
    connect(mCancel, &QPushButton::clicked, this, &GenerationPanel::cancel);
    connect(mPrompt, &QLineEdit::returnPressed, this, &GenerationPanel::generate);
    // A pane's text belongs to the variant that wrote it: another choice clears it (it once stayed under the new name).
    connect(mLeft, &QComboBox::currentTextChanged, mLeftText, &QPlainTextEdit::clear);
    connect(mRight, &QComboBox::currentTextChanged, mRightText, &QPlainTextEdit::clear);
    setDocument(nullptr);
}

GenerationPanel::~GenerationPanel() = default;

void GenerationPanel::setDocument(ProjectDocument* document) {
    if (mJob) mJob.reset();   // cancels and waits: the job reads the old document's model (no finished signal then)
    mProgress->setVisible(false);
    mCancel->setEnabled(false);
    mGenerate->setEnabled(true);
    mLeft->setEnabled(true);
    mRight->setEnabled(true);
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    setEnabled(document != nullptr);
    if (document) connect(document, &ProjectDocument::variantsChanged, this, &GenerationPanel::refreshVariants);
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
                if (combo->findText(previous) >= 0) combo->setCurrentText(previous);
                else if (combo == mRight && combo->count() > 1) combo->setCurrentIndex(combo->count() - 1);
            }
        }
        if (combo->currentText() != previous) (combo == mLeft ? mLeftText : mRightText)->clear();
    }
}

void GenerationPanel::setPrompt(const QString& prompt) { mPrompt->setText(prompt); }
void GenerationPanel::setTokens(int tokens) { mTokens->setValue(tokens); }
void GenerationPanel::setChat(bool on) { mChat->setChecked(on); }
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
    params.tokens = mTokens->value();
    const bool chat = mChat->isChecked();
    QString notes;   // chat warnings, shown above the answers
    if (chat) {
        try {
            const ChatPrompt prompt = prepareChatPrompt(*model->tokenizer, {{"user", params.prompt}});
            params.prompt = prompt.text;
            params.parseSpecial = true;
            params.addBos = model->tokenizer->addBosByDefault();
            params.stopIds = prompt.stopIds;
            for (const auto& w : prompt.warnings) notes += tr("Warning: %1\n\n").arg(QString::fromStdString(w));
        } catch (const Error& e) {
            mLastError = tr("Chat: %1").arg(QString::fromStdString(e.what()));
            mLeftText->setPlainText(mLastError);
            mRightText->clear();
            return false;
        }
    }
    auto texts = std::make_shared<std::array<std::string, 2>>();
    const RuntimeOptions options = guiRuntimeOptions();   // Run ▸ Compute On
    mJob = std::make_unique<BackgroundJob>(tr("Generate"), [snapshot, model, names, params, texts, options](Feedback& feedback) {
        ProjectRunner runner(snapshot, *model, options);
        for (size_t side = 0; side < 2; ++side) {
            SubFeedback build(&feedback, side * 0.5, side * 0.5 + 0.35), decode(&feedback, side * 0.5 + 0.35, side * 0.5 + 0.5);
            std::unique_ptr<Model> variant;
            if (names[side] != Project::kBaseName) variant = runner.build(names[side], &build);
            Transformer runtime(variant ? *variant : *model, options);
            (*texts)[side] = cwb::generate(runtime, *model->tokenizer, params, &decode).text;
        }
    });
    connect(mJob.get(), &BackgroundJob::progressChanged, this, [this](double f) { mProgress->setValue(int(std::lround(f * 1000))); });
    connect(mJob.get(), &BackgroundJob::finished, this, [this, texts, prompt = chat ? notes : mPrompt->text()](bool cancelled, const QString& error) {
        mProgress->setVisible(false);
        mCancel->setEnabled(false);
        mGenerate->setEnabled(true);
        mLeft->setEnabled(true);
        mRight->setEnabled(true);
        const bool ok = !cancelled && error.isEmpty();
        if (ok) {
            mLeftText->setPlainText(prompt + QString::fromStdString((*texts)[0]));
            mRightText->setPlainText(prompt + QString::fromStdString((*texts)[1]));
        } else {
            mLastError = cancelled ? tr("Cancelled.") : tr("Generation failed: %1").arg(error);
            mLeftText->setPlainText(mLastError);
            mRightText->clear();
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
