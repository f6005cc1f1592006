#pragma once
// ScoreHistogram: how a set of scores (e.g. one block's per-channel importance) is distributed, as bars over
// equal-width bins. Colours follow the palette (light/dark); QCustomPlot stays behind the pimpl (STYLE.md §10).
#include <QString>
#include <QWidget>

#include <memory>
#include <vector>

namespace cwb {

// Equal-width bins from the smallest to the largest finite value; NaN and infinities are skipped. The largest
// value falls in the last bin. All values equal: one bin holding them all. No finite value: no bins.
struct Histogram {
    double low = 0, high = 0;
    std::vector<int> counts;
    double binWidth() const { return counts.empty() ? 0 : (high - low) / double(counts.size()); }
};
Histogram makeHistogram(const std::vector<double>& values, int bins);

class ScoreHistogram : public QWidget {
    Q_OBJECT
public:
    explicit ScoreHistogram(QWidget* parent = nullptr);
    ~ScoreHistogram() override;

    void setScores(const QString& title, const QString& unit, const std::vector<double>& values, int bins = 40);
    void clear();
    const Histogram& histogram() const;
    QString title() const;
    // The plot's colours, for checking that they follow the palette.
    QColor backgroundColor() const;
    QColor textColor() const;
    bool savePng(const QString& path, int width, int height);

protected:
    void changeEvent(QEvent* event) override;

private:
    struct Private;
    std::unique_ptr<Private> m;
};

} // namespace cwb
