#pragma once
// LossCurve: live training/calibration curves (one line per named series, e.g. "train", "eval").
// Cheap to feed at a high rate: points are appended at once, the plot rescales and redraws at most
// every 50 ms. QCustomPlot stays behind the pimpl (STYLE.md §10).

#include <QColor>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <memory>
#include <utility>

namespace cwb {

class LossCurve : public QWidget {
    Q_OBJECT
public:
    explicit LossCurve(QWidget* parent = nullptr);
    ~LossCurve() override;

    // Appends a point to `series` (created on first use, with the next colour). Steps are expected
    // in increasing order per series (out-of-order points are accepted, at a sorting cost).
    // Non-finite values (a diverged loss) are ignored and not counted.
    void addPoint(const QString& series, double step, double value);
    void clear();
    void setAxisLabels(const QString& stepLabel, const QString& valueLabel);
    // Value axis. On a log axis, points <= 0 are drawn as hollow markers a decade below the smallest positive value,
    // and the axis label says "○ = 0".
    void setLogScale(bool logarithmic);
    // Names of integer steps (step i is names[i]), said in the hover tooltip instead of "step i": the layer of a
    // per-layer chart. Cleared by clear().
    void setStepNames(const QStringList& names);
    // The hover tooltip's text for a pointer at `pos` (this widget's coordinates): the step of the nearest point drawn
    // within a few pixels, then the value of every series at that step (lines that lie on one another are all
    // named), or "" when no point is that near. Elsewhere the widget's own toolTip() shows.
    QString pointTextAt(const QPoint& pos) const;
    // Draws `series` in plot::seriesColor(index) instead of the next colour in creation order (one colour per variant
    // across charts), and, when `dashed`, with a dashed line (stale results).
    void setSeriesStyle(const QString& series, int colourIndex, bool dashed = false);
    // The series' line as drawn (tests): its colour, and whether it is dashed. Invalid colour for an unknown series.
    QColor seriesColor(const QString& series) const;
    bool isDashed(const QString& series) const;
    // Where the point (`series`, `step`) is drawn, in this widget's coordinates (tests); (-1, -1) when absent.
    QPoint pointPixel(const QString& series, double step) const;
    // For tests: whether the log value axis labels only powers of ten (values over several decades, or too little room
    // for 1-2-5 steps), the value ticks as last drawn and where a value is drawn (y in this widget), and whether the
    // legend sits outside the plotted area.
    bool labelsDecades() const;
    QVector<double> valueTicks() const;
    int valuePixel(double value) const;
    bool legendOutsidePlot() const;

    int seriesCount() const;
    int pointCount(const QString& series) const;  // 0 for an unknown series
    QStringList seriesNames() const;              // in order of creation
    std::pair<double, double> stepRange() const;  // the x axis as drawn
    std::pair<double, double> valueRange() const; // the y axis as drawn
    QString valueAxisLabel() const;
    // Redraws now instead of waiting for the 50 ms timer (tests, final update after training).
    void flush();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;
    void changeEvent(QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    struct Private;
    std::unique_ptr<Private> m;
};

}  // namespace cwb
