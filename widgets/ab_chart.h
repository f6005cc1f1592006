#pragma once
// AbChart: one metric at a time, one bar per variant (the baseline first, in its own colour), with
// optional error bars and value labels. QCustomPlot stays behind the pimpl (STYLE.md §10).

#include <QColor>
#include <QString>
#include <QWidget>

#include <memory>
#include <vector>

namespace cwb {

struct AbSeries {
    QString variant;
    double value = 0.0;
    double error = 0.0;  // symmetric error (e.g. standard error); NaN or 0 = none
    bool stale = false;  // measured from what has changed since: drawn hatched and pale, not as a current result
    int colour = -1;     // plot::seriesColor index, to match the variant's colour in other charts; -1: by position
};

class AbChart : public QWidget {
    Q_OBJECT
public:
    explicit AbChart(QWidget* parent = nullptr);
    ~AbChart() override;

    // Shows `series` for `metric`; with `firstIsBaseline` series[0] is the baseline (its own colour, labelled so);
    // without, every bar is a variant (KL and top-1 against the base have no bar for the base). Replaces what was
    // shown. A series with a non-finite value is drawn as an empty slot labelled "n/a". Error bars are drawn only
    // for series whose error is finite and > 0; hasErrorBars() tells whether any is.
    void setMetric(const QString& metric, const QString& unit, const std::vector<AbSeries>& series, bool firstIsBaseline = true);
    bool hasBaseline() const;
    void clear();

    QString metric() const;
    QString unit() const;
    int seriesCount() const;             // number of bars, baseline included
    double barValue(int index) const;    // value plotted for bar `index`; NaN when out of range
    double barError(int index) const;    // error bar half-length; 0 when none or out of range
    QString variantName(int index) const;
    bool isDrawnStale(int index) const;  // the bar is hatched (AbSeries::stale)
    QColor barColor(int index) const;    // the bar's outline as drawn (its fill darkened; tests); invalid out of range
    bool hasErrorBars() const;

    // Renders the chart offscreen at width × height pixels (the widget need not be shown).
    bool savePng(const QString& path, int width, int height);

protected:
    void changeEvent(QEvent* event) override;

private:
    struct Private;
    std::unique_ptr<Private> m;
};

}  // namespace cwb
