#pragma once
// Side-by-side text generation (Compare tab): one prompt, two variants (or the base) chosen in combo boxes,
// each built from the base and decoded greedily on a worker thread (progress, Cancel); the two texts are shown
// in two panes. With Chat checked the prompt goes in as a user message, in the model's chat format.
#include <QWidget>

#include <memory>

class QCheckBox;
class QComboBox;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace cwb {

class BackgroundJob;
class ProjectDocument;

class GenerationPanel : public QWidget {
    Q_OBJECT
public:
    explicit GenerationPanel(QWidget* parent = nullptr);
    ~GenerationPanel() override;   // cancels and waits for a running generation

    void setDocument(ProjectDocument* document);
    void setPrompt(const QString& prompt);
    void setTokens(int tokens);
    // Chat: the prompt is sent as a user message in the model's chat format (core/tokenizer/chat_format.h), and the
    // panes show the answers alone.
    void setChat(bool on);
    // "base" or a variant name; false when it is not in the list.
    bool setVariants(const QString& left, const QString& right);
    // Starts generating; false (reason in lastError()) when it cannot start.
    bool generate();
    void cancel();
    bool isGenerating() const;
    QString leftText() const;
    QString rightText() const;
    QString lastError() const { return mLastError; }

signals:
    void generationStarted(const QString& title);   // for the status bar
    void generationFinished(bool succeeded);

private:
    void refreshVariants();

    ProjectDocument* mDocument = nullptr;
    QComboBox* mLeft;
    QComboBox* mRight;
    QLineEdit* mPrompt;
    QCheckBox* mChat;
    QSpinBox* mTokens;
    QPushButton* mGenerate;
    QPushButton* mCancel;
    QProgressBar* mProgress;
    QPlainTextEdit* mLeftText;
    QPlainTextEdit* mRightText;
    std::unique_ptr<BackgroundJob> mJob;
    QString mLastError;
};

} // namespace cwb
