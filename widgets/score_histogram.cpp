#include "widgets/score_histogram.h"

#include "widgets/plot_palette.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace cwb {

Histogram makeHistogram(const std::vector<double>& values, int bins) {
    Histogram h;
    std::vector<double> finite;
    for (double v : values)
        if (std::isfinite(v)) finite.push_back(v);
    if (finite.empty() || bins < 1) return h;
    const auto [lo, hi] = std::minmax_element(finite.begin(), finite.end());
    h.low = *lo;
    h.high = *hi;
    if (h.high == h.low) {
        h.counts = {int(finite.size())};
        return h;
    }
    h.counts.assign(size_t(bins), 0);
    for (double v : finite) {
        const int bin = std::min(bins - 1, int((v - h.low) / (h.high - h.low) * bins));
        ++h.counts[size_t(bin)];
    }
    return h;
}

struct ScoreHistogram::Private {
    QCustomPlot* plot = nullptr;
    QCPTextElement* title = nullptr;
    QCPBars* bars = nullptr;
    Histogram histogram;
    QString titleText;

    void applyPalette(const QPalette& palette) {
        plot::applyPalette(plot, palette);
        QColor fill = plot::seriesColor(0);
        bars->setPen(QPen(fill.darker(120)));
        fill.setAlpha(200);
        bars->setBrush(fill);
    }
};

ScoreHistogram::ScoreHistogram(QWidget* parent) : QWidget(parent), m(std::make_unique<Private>()) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m->plot = new QCustomPlot(this);
    layout->addWidget(m->plot);
    m->plot->plotLayout()->insertRow(0);
    QFont bold = font();
    bold.setBold(true);
    m->title = new QCPTextElement(m->plot, QString(), bold);
    m->plot->plotLayout()->addElement(0, 0, m->title);
    m->bars = new QCPBars(m->plot->xAxis, m->plot->yAxis);
    m->plot->yAxis->setLabel(tr("channels"));
    m->applyPalette(palette());
}

ScoreHistogram::~ScoreHistogram() = default;

void ScoreHistogram::setScores(const QString& title, const QString& unit, const std::vector<double>& values, int bins) {
    m->histogram = makeHistogram(values, bins);
    m->titleText = title;
    m->title->setText(title);
    m->plot->xAxis->setLabel(unit);
    QVector<double> keys, counts;
    const double width = m->histogram.binWidth() > 0 ? m->histogram.binWidth() : 1.0;
    int most = 0;
    for (size_t i = 0; i < m->histogram.counts.size(); ++i) {
        keys << m->histogram.low + (double(i) + 0.5) * width;
        counts << m->histogram.counts[i];
        most = std::max(most, m->histogram.counts[i]);
    }
    m->bars->setWidth(width);
    m->bars->setData(keys, counts, true);
    if (!keys.isEmpty()) {
        m->plot->xAxis->setRange(m->histogram.low - width * 0.5, m->histogram.low + width * (double(keys.size()) + 0.5));
        m->plot->yAxis->setRange(0, most * 1.1 + 1);
    }
    m->plot->replot(QCustomPlot::rpQueuedReplot);
}

void ScoreHistogram::clear() { setScores({}, {}, {}); }
const Histogram& ScoreHistogram::histogram() const { return m->histogram; }
QString ScoreHistogram::title() const { return m->titleText; }
QColor ScoreHistogram::backgroundColor() const { return m->plot->axisRect()->backgroundBrush().color(); }
QColor ScoreHistogram::textColor() const { return m->plot->xAxis->tickLabelColor(); }

bool ScoreHistogram::savePng(const QString& path, int width, int height) {
    return width > 0 && height > 0 && m->plot->savePng(path, width, height, 1.0);
}

void ScoreHistogram::changeEvent(QEvent* event) {
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange) {
        m->applyPalette(palette());
        m->plot->replot(QCustomPlot::rpQueuedReplot);
    }
    QWidget::changeEvent(event);
}

} // namespace cwb
