#pragma once
// A/B comparison of the stored results: a metric chooser and an AbChart (baseline first, one bar per
// variant with results, error bars where the metric has them), and a table of every stored metric.
#include <QWidget>

class QComboBox;
class QTableWidget;

namespace cwb {

class AbChart;
class ProjectDocument;

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);

    void setDocument(ProjectDocument* document);
    void setMetric(const QString& metric);   // "perplexity", "kl_mean", "top1", "bytes", "bits_per_weight"
    QString metric() const;
    AbChart* chart() const { return mChart; }
    QTableWidget* table() const { return mTable; }

public slots:
    void refresh();

private:
    ProjectDocument* mDocument = nullptr;
    QComboBox* mMetric;
    AbChart* mChart;
    QTableWidget* mTable;
};

} // namespace cwb
