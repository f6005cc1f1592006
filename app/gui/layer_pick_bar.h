#pragma once
// Layers picked on the importance heatmap, and the two edits they drive on a step of the current variant:
// make them the step's `targets`, or give them a per-layer override (e.g. bits = 8 for mixed precision).
// Both are undo commands; a refusal (nothing picked, no step, a step without `bits`) is told in a message.
#include <QWidget>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace cwb {

class ProjectDocument;

class LayerPickBar : public QWidget {
    Q_OBJECT
public:
    explicit LayerPickBar(QWidget* parent = nullptr);

    void setDocument(ProjectDocument* document);
    // Linear names or group prefixes ("model.layers.2.mlp"), kept in pick order without duplicates.
    void setPicked(const std::vector<std::string>& layers);
    void togglePicked(const std::string& layer);
    void addPicked(const std::vector<std::string>& layers);
    const std::vector<std::string>& picked() const { return mPicked; }

    // The step of the current variant the edits apply to (-1: none).
    int stepIndex() const;
    void setStepIndex(int index);
    void setOverrideBits(int bits);

    // `interactive` false: no message boxes (tests); the reason goes to lastError().
    bool useAsTargets(bool interactive = true);
    bool addBitsOverride(bool interactive = true);
    bool addOverride(const nlohmann::json& params, bool interactive = true);
    QString lastError() const { return mLastError; }
    QString stepCaption() const;   // "Step of variant-a:": which variant the picks edit

signals:
    // A step was edited: what changed and in which variant, for the status bar (the edit once went silently into the
    // variant shown in the Pipeline tab, which the user had not looked at, GUI probe).
    void stepEdited(const QString& message);
    void pickedChanged();   // for the map's marks

private:
    void refreshSteps();
    void refreshLabel();
    bool refuse(const QString& why, bool interactive);

    ProjectDocument* mDocument = nullptr;
    std::vector<std::string> mPicked;
    QLabel* mLabel;
    QLabel* mStepLabel;
    QComboBox* mStep;
    QPushButton* mTargets;
    QSpinBox* mBits;
    QPushButton* mOverride;
    QPushButton* mClear;
    QString mLastError;
};

} // namespace cwb
