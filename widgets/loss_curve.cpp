#include "widgets/loss_curve.h"

#include "widgets/plot_palette.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>
#include <vector>

namespace cwb {

namespace {
constexpr int kReplotIntervalMs = 50;
}

struct LossCurve::Private {
    QCustomPlot* plot = nullptr;
    QTimer* replotTimer = nullptr;
    // Log axis: decades labelled where the values span several; evenly spaced labels within one decade, where the
    // log ticker put its labels on top of each other and left half the axis bare (GUI probe).
    QSharedPointer<QCPAxisTickerLog> decadeTicker = QSharedPointer<QCPAxisTickerLog>::create();
    QSharedPointer<QCPAxisTicker> evenTicker = QSharedPointer<QCPAxisTicker>::create();
    std::vector<std::pair<QString, QCPGraph*>> graphs;  // creation order = colour order

    QCPGraph* find(const QString& name) const
    {
        for (const auto& [graphName, graph] : graphs)
            if (graphName == name)
                return graph;
        return nullptr;
    }

    void applyPalette(const QPalette& palette)
    {
        plot::applyPalette(plot, palette);
        for (size_t i = 0; i < graphs.size(); ++i)
            graphs[i].second->setPen(QPen(plot::seriesColor(int(i)), 1.8));
    }

    // The legend sits below the plot, in rows, for two series or more (inside the plot it covered the curves: GUI
    // probe). Hidden, it is taken out of the layout, which would otherwise keep an empty strip for it.
    void placeLegend(bool shown)
    {
        QCPLayoutGrid* layout = plot->plotLayout();
        const bool placed = plot->legend->layout() == layout;
        if (shown && !placed) {
            layout->addElement(1, 0, plot->legend);
            layout->setRowStretchFactor(1, 0.001);
        } else if (!shown && placed) {
            layout->take(plot->legend);
            layout->simplify();
        }
        plot->legend->setVisible(shown);
    }

    // `now`: painted before returning (flush); otherwise on the next pass of the event loop.
    void redraw(bool now = false)
    {
        placeLegend(graphs.size() > 1);
        if (graphs.empty()) {   // no data: no axes of data gone (another model's 35 layers and 1e-5..0.1 stayed, GUI probe)
            plot->xAxis->setRange(0, 1);
            plot->yAxis->setRange(plot->yAxis->scaleType() == QCPAxis::stLogarithmic ? QCPRange(0.1, 1) : QCPRange(0, 1));
        } else {
            plot->rescaleAxes(true);
            // A flat or single-point curve gives an empty range; widen it a little.
            for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) {
                QCPRange range = axis->range();
                if (range.size() <= 0) {
                    const double pad = range.center() == 0 ? 1.0 : std::abs(range.center()) * 0.05;
                    axis->setRange(range.center() - pad, range.center() + pad);
                }
            }
            plot->yAxis->scaleRange(1.05, plot->yAxis->range().center());
            if (plot->yAxis->scaleType() == QCPAxis::stLogarithmic) {
                const QCPRange range = plot->yAxis->range();
                const bool withinADecade = range.lower > 0 && range.upper / range.lower < 10.0;
                const QSharedPointer<QCPAxisTicker> wanted = withinADecade ? evenTicker : decadeTicker.staticCast<QCPAxisTicker>();
                if (plot->yAxis->ticker() != wanted)
                    plot->yAxis->setTicker(wanted);
            }
        }
        plot->replot(now ? QCustomPlot::rpImmediateRefresh : QCustomPlot::rpQueuedReplot);
    }
};

LossCurve::LossCurve(QWidget* parent) : QWidget(parent), m(std::make_unique<Private>())
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m->plot = new QCustomPlot(this);
    layout->addWidget(m->plot);
    m->plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m->plot->setNoAntialiasingOnDrag(true);
    m->plot->xAxis->setLabel(tr("step"));
    m->plot->yAxis->setLabel(tr("loss"));
    m->plot->legend->setVisible(false);
    m->plot->axisRect()->insetLayout()->take(m->plot->legend);   // placed below the plot when shown (placeLegend)
    m->plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m->plot->legend->setWrap(4);

    m->replotTimer = new QTimer(this);
    m->replotTimer->setSingleShot(true);
    m->replotTimer->setInterval(kReplotIntervalMs);
    connect(m->replotTimer, &QTimer::timeout, this, [this] { m->redraw(); });
    m->applyPalette(palette());
}

LossCurve::~LossCurve() = default;

void LossCurve::addPoint(const QString& series, double step, double value)
{
    if (!std::isfinite(step) || !std::isfinite(value))
        return;
    QCPGraph* graph = m->find(series);
    if (!graph) {
        graph = m->plot->addGraph();
        graph->setName(series);
        graph->setPen(QPen(plot::seriesColor(int(m->graphs.size())), 1.8));
        m->graphs.emplace_back(series, graph);
    }
    graph->addData(step, value);  // appending in key order is O(1)
    if (!m->replotTimer->isActive())
        m->replotTimer->start();
}

void LossCurve::clear()
{
    m->replotTimer->stop();
    m->plot->clearGraphs();
    m->graphs.clear();
    m->redraw();
}

void LossCurve::setAxisLabels(const QString& stepLabel, const QString& valueLabel)
{
    m->plot->xAxis->setLabel(stepLabel);
    m->plot->yAxis->setLabel(valueLabel);
    m->plot->replot(QCustomPlot::rpQueuedReplot);
}

void LossCurve::setLogScale(bool logarithmic)
{
    m->plot->yAxis->setScaleType(logarithmic ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    m->plot->yAxis->setTicker(logarithmic ? m->decadeTicker.staticCast<QCPAxisTicker>() : m->evenTicker);
    m->redraw();
}

int LossCurve::seriesCount() const { return int(m->graphs.size()); }

bool LossCurve::labelsDecades() const { return !m->plot->yAxis->ticker().dynamicCast<QCPAxisTickerLog>().isNull(); }

bool LossCurve::legendOutsidePlot() const { return m->plot->legend->layout() == m->plot->plotLayout(); }

int LossCurve::pointCount(const QString& series) const
{
    const QCPGraph* graph = m->find(series);
    return graph ? graph->dataCount() : 0;
}

std::pair<double, double> LossCurve::stepRange() const { return {m->plot->xAxis->range().lower, m->plot->xAxis->range().upper}; }

QStringList LossCurve::seriesNames() const
{
    QStringList names;
    for (const auto& entry : m->graphs)
        names << entry.first;
    return names;
}

void LossCurve::flush()
{
    m->replotTimer->stop();
    m->redraw(true);   // a queued replot would leave the picture as it was until the event loop ran
}

void LossCurve::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange) {
        m->applyPalette(palette());
        m->plot->replot(QCustomPlot::rpQueuedReplot);
    }
    QWidget::changeEvent(event);
}

}  // namespace cwb
