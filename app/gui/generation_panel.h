#pragma once
// Side-by-side text generation (Compare tab): one prompt, two variants (or the base) chosen in combo boxes, each built
// from the base and decoded on a worker thread (progress, Cancel), greedily or sampled with one seed for both; the
// texts show in two panes as they come. With Chat checked the prompt goes in as a user message, in the model's chat
// format or one named. Variants built are kept for the next Generate while their recipes and inputs stay the same.
#include <QWidget>

#include <array>
#include <memory>
#include <string>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace cwb {

class BackgroundJob;
class Model;
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
    // A chat format by name (chatFormatNames()), or "" for the one the model's template writes; false when unknown.
    bool setChatFormat(const QString& name);
    // Sampling: temperature 0 is greedy; both sides draw with the same seed.
    void setSampling(double temperature, int topK, int seed);
    // "base" or a variant name; false when it is not in the list.
    bool setVariants(const QString& left, const QString& right);
    QString leftVariant() const;
    QString rightVariant() const;
    // Starts generating; false (reason in lastError()) when it cannot start.
    bool generate();
    void cancel();
    bool isGenerating() const;
    QString leftText() const;
    QString rightText() const;
    QString lastError() const { return mLastError; }
    // How many variants the last generate() built (0 when both sides were the base or were kept from before).
    int lastBuildCount() const { return mLastBuildCount; }

signals:
    void generationStarted(const QString& title);   // for the status bar
    void generationFinished(bool succeeded);

private:
    // A variant built for a pane, with what it was built from: its lineage's steps and the calibration settings.
    struct BuiltVariant {
        std::string key;
        std::shared_ptr<const Model> base;
        std::shared_ptr<const Model> model;
    };
    void refreshVariants();
    void updateControls();
    std::string buildKey(const std::string& variant) const;   // "" when the recipe cannot be read (the build says why)

    ProjectDocument* mDocument = nullptr;
    QComboBox* mLeft;
    QComboBox* mRight;
    QLineEdit* mPrompt;
    QCheckBox* mChat;
    QComboBox* mFormat;
    QSpinBox* mTokens;
    QDoubleSpinBox* mTemperature;
    QSpinBox* mTopK;
    QSpinBox* mSeed;
    QPushButton* mGenerate;
    QPushButton* mCancel;
    QProgressBar* mProgress;
    QPlainTextEdit* mLeftText;
    QPlainTextEdit* mRightText;
    std::unique_ptr<BackgroundJob> mJob;
    std::array<BuiltVariant, 2> mBuilt;   // what the panes were last generated with
    int mLastBuildCount = 0;
    unsigned mGeneration = 0;   // text streamed from an earlier generation, arriving late, is dropped
    QString mLastError;
};

} // namespace cwb
