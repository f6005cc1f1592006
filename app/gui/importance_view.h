#pragma once
// Importance heatmaps: a metric chooser over the core's importance kinds, the stored map of that kind shown
// in an ImportanceHeatmap, and Compute, which measures it on a worker thread (progress, Cancel) and stores
// it in the project. Clicking a cell names the layer it belongs to (layerClicked) and picks it for the
// LayerPickBar below the map (Ctrl+click adds/removes, Shift+click adds the whole row; also a context menu),
// which sets a step's targets or per-layer overrides from the picked layers. For per-channel kinds a histogram
// shows the distribution of one block's channel scores (pick the block in its chooser or click its row).
#include <QWidget>

#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace cwb {

class BackgroundJob;
class ImportanceHeatmap;
class LayerPickBar;
class ScoreHistogram;
class ProjectDocument;

class ImportanceView : public QWidget {
    Q_OBJECT
public:
    explicit ImportanceView(QWidget* parent = nullptr);
    ~ImportanceView() override;

    void setDocument(ProjectDocument* document);
    QString kind() const;
    QString statusText() const;   // the line under the heatmap
    void setKind(const QString& kind);
    // Starts computing the chosen kind; false (with a message box) when the project has no text to measure on.
    bool compute();
    void cancel();
    bool isComputing() const;
    // The Windows × tokens boxes; showing a stored map sets them to what it was measured with.
    void setWindowSize(int samples, int tokens);
    std::pair<int, int> windowSize() const;
    // Per-layer sensitivity kinds: the step each layer is compressed with in turn, RTN int4 g32 (the default) or one of
    // the current variant's steps (its method and parameters; a step's "head" and layer fields do not apply). It
    // offered the default only, whatever the variant's method (GUI probe).
    QComboBox* probeChooser() const { return mProbe; }
    nlohmann::json probeStep() const;
    bool chooseProbe(const nlohmann::json& step);   // false when no entry has that step
    ImportanceHeatmap* heatmap() const { return mHeatmap; }
    LayerPickBar* pickBar() const { return mPick; }
    // channels.* kinds: the distribution of one block's channel scores (hidden for other kinds).
    ScoreHistogram* histogram() const { return mHistogram; }
    void showChannelHistogram(int row);
    // Picks the layer of a cell as a click with `modifiers` does (none: replace; Ctrl: toggle; Shift: add its row).
    void pickCell(int row, int column, Qt::KeyboardModifiers modifiers = Qt::NoModifier);
    // The layer (or sublayer group) a cell stands for; "" when none.
    QString layerForCell(int row, int column) const;
    // Outlines the picked layers' cells on the map (picks had no mark there, GUI probe).
    void markPicked();

signals:
    void layerClicked(const QString& layer);   // a linear layer or a block's sublayer group ("model.layers.2.mlp")
    void jobStarted(const QString& title);
    void jobFinished();
    void computed(const QString& kind);        // stored in the project

private:
    void showStored();
    void refreshProbes();
    void showContextMenu(const QPoint& pos);

    ProjectDocument* mDocument = nullptr;
    QComboBox* mKind;
    QSpinBox* mSamples;
    QSpinBox* mTokens;
    QLabel* mProbeLabel;
    QComboBox* mProbe;
    QPushButton* mCompute;
    QPushButton* mCancel;
    QProgressBar* mProgress;
    QLabel* mStatus;
    ImportanceHeatmap* mHeatmap;
    LayerPickBar* mPick;
    QWidget* mChannelPanel;
    QComboBox* mChannelBlock;
    ScoreHistogram* mHistogram;
    std::unique_ptr<BackgroundJob> mJob;
};

} // namespace cwb
