#pragma once
// A/B comparison of the stored results: a metric chooser and an AbChart (baseline first, one bar per
// variant with results, error bars where the metric has them), a table of every stored metric, and
// side-by-side text generation of two variants (GenerationPanel), and a per-layer reconstruction-error chart (one
// line per variant over the linear layers in block order).
#include <QWidget>

#include <memory>

class QComboBox;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace cwb {

class AbChart;
class BackgroundJob;
class GenerationPanel;
class LossCurve;
class ProjectDocument;

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    ~CompareView() override;   // cancels and waits for a running measurement

    void setDocument(ProjectDocument* document);
    // "perplexity", "kl_mean", "top1", "bytes", "bits_per_weight", "decode_ms_p50", "prefill_tokens_per_second"
    void setMetric(const QString& metric);
    QString metric() const;
    AbChart* chart() const { return mChart; }
    QTableWidget* table() const { return mTable; }
    LossCurve* layerErrorChart() const { return mLayerErrors; }
    // What the label above the table says of the stored results, one line per variant: a perplexity above the
    // vocabulary size (worse than chance: broken weights). Empty when there is nothing to warn of.
    QString warnings() const;
    GenerationPanel* generationPanel() const { return mGeneration; }
    // Measures decode latency (ms per token, p50) and prefill speed of the base and every variant on a worker
    // thread (each variant built from the base first) and stores them with its results; the other stored
    // metrics stay. false when a measurement is already running or there is no document.
    bool measureLatency(int promptTokens = 64, int genTokens = 32);
    bool isMeasuring() const;
    void cancelMeasurement();
    QString measurementStatus() const;   // what the last measurement ended with; for tests

signals:
    void latencyStarted(const QString& title);   // for the status bar
    void latencyMeasured(bool succeeded, const QString& error);

public slots:
    void refresh();

private:
    ProjectDocument* mDocument = nullptr;
    QComboBox* mMetric;
    AbChart* mChart;
    LossCurve* mLayerErrors;
    QTableWidget* mTable;
    class QLabel* mWarnings;
    QPushButton* mMeasure;
    QPushButton* mCancelMeasure;
    QProgressBar* mProgress;
    class QLabel* mMeasureStatus;   // the outcome of the last measurement (an error names the variant and why)
    bool mLatencyStored = false;    // mMeasureStatus says what latency is stored: redrawn as results change
    QString mLatencyAside;          // what the last measurement could not store, kept after that line
    std::unique_ptr<BackgroundJob> mJob;
    GenerationPanel* mGeneration;
};

} // namespace cwb
