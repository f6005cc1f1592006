#pragma once
// Importance heatmaps: a metric chooser over the core's importance kinds, the stored map of that kind shown
// in an ImportanceHeatmap, and Compute, which measures it on a worker thread (progress, Cancel) and stores
// it in the project. Clicking a cell names the layer it belongs to (layerClicked).
#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace cwb {

class BackgroundJob;
class ImportanceHeatmap;
class ProjectDocument;

class ImportanceView : public QWidget {
    Q_OBJECT
public:
    explicit ImportanceView(QWidget* parent = nullptr);
    ~ImportanceView() override;

    void setDocument(ProjectDocument* document);
    QString kind() const;
    void setKind(const QString& kind);
    // Starts computing the chosen kind; false (with a message box) when the project has no text to measure on.
    bool compute();
    void cancel();
    bool isComputing() const;
    void setWindowSize(int samples, int tokens);
    ImportanceHeatmap* heatmap() const { return mHeatmap; }

signals:
    void layerClicked(const QString& layer);   // a linear layer or a block's sublayer group ("model.layers.2.mlp")
    void jobStarted(const QString& title);
    void jobFinished();
    void computed(const QString& kind);        // stored in the project

private:
    void showStored();
    QString layerForCell(int row, int column) const;

    ProjectDocument* mDocument = nullptr;
    QComboBox* mKind;
    QSpinBox* mSamples;
    QSpinBox* mTokens;
    QPushButton* mCompute;
    QPushButton* mCancel;
    QProgressBar* mProgress;
    QLabel* mStatus;
    ImportanceHeatmap* mHeatmap;
    std::unique_ptr<BackgroundJob> mJob;
};

} // namespace cwb
