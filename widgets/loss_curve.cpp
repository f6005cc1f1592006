#include "widgets/loss_curve.h"

#include "widgets/plot_palette.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QHelpEvent>
#include <QFontMetricsF>
#include <QResizeEvent>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

namespace cwb {

namespace {
constexpr int kReplotIntervalMs = 50;

// Ticks for a log axis, evenly spread on screen: the densest of 1-2-5 per decade, 1-3, every decade, every 2nd, 5th,
// 10th... decade that stays within the tick count (set from the axis' height: the log ticker put seven labels into a
// 100-pixel chart, and within a decade evenly spaced values bunched at its top; GUI probe). Below two such ticks in
// range (values within a factor of about 2) the scale is nearly linear and evenly spaced values are used.
class LogSpreadTicker : public QCPAxisTicker {
public:
    // The powers of ten among the ticks: whether labels are decades (tests).
    bool decadesOnly = false;

protected:
    int getSubTickCount(double) override { return 0; }

    QVector<double> createTickVector(double tickStep, const QCPRange& range) override
    {
        decadesOnly = false;
        if (range.lower <= 0 || range.upper <= range.lower)
            return QCPAxisTicker::createTickVector(tickStep, range);
        // Decades from the lowest in range, so that a stride up to the span still gives two ticks.
        const int first = int(std::ceil(std::log10(range.lower) - 1e-9));
        const int last = int(std::floor(std::log10(range.upper) + 1e-9));
        const auto collect = [&](std::initializer_list<double> mantissas, int decadeStride) {
            QVector<double> ticks;
            for (int e = first - 1; e <= last; ++e) {
                for (double m : mantissas) {
                    const double v = m * std::pow(10.0, e);
                    const bool onStride = m == 1 ? (e - first) % decadeStride == 0 : decadeStride == 1;
                    if (onStride && v >= range.lower && v <= range.upper)
                        ticks << v;
                }
            }
            return ticks;
        };
        const int most = std::max(2, tickCount());
        QVector<double> denser;   // the last level with two ticks or more: better than a lone label
        for (auto mantissas : {std::initializer_list<double>{1, 2, 5}, std::initializer_list<double>{1, 3}}) {
            const QVector<double> ticks = collect(mantissas, 1);
            if (ticks.size() < 2)
                return denser.isEmpty() ? QCPAxisTicker::createTickVector(tickStep, range)   // within ~2x: near linear
                                        : denser;
            if (ticks.size() <= most)
                return ticks;
            denser = ticks;
        }
        for (int stride = 1;; stride *= 10)
            for (int multiple : {1, 2, 5}) {
                const QVector<double> ticks = collect({1}, stride * multiple);
                if (ticks.size() < 2)
                    return denser;
                decadesOnly = true;
                if (ticks.size() <= most)
                    return ticks;
                denser = ticks;
            }
    }
};
}

struct LossCurve::Private {
    QCustomPlot* plot = nullptr;
    QTimer* replotTimer = nullptr;
    QSharedPointer<LogSpreadTicker> logTicker = QSharedPointer<LogSpreadTicker>::create();
    QSharedPointer<QCPAxisTicker> evenTicker = QSharedPointer<QCPAxisTicker>::create();
    std::vector<std::pair<QString, QCPGraph*>> graphs;  // creation order = colour order
    // On a log axis, values <= 0 have no place: each series' are kept here, drawn as hollow markers on a floor below
    // the smallest positive value (exact zeros, a layer reconstructed exactly, fell off the chart: GUI probe).
    std::map<QCPGraph*, std::pair<QCPGraph*, QVector<double>>> floorPoints;   // graph -> (markers, their steps)
    QString valueLabel = QObject::tr("loss");
    QStringList stepNames;   // hover text of integer steps (setStepNames)
    std::map<QString, std::pair<int, bool>> styles;   // series -> (colour index, dashed), from setSeriesStyle
    bool logarithmic = false;

    // Each point as drawn: series name, step, value (0 for a floor marker) and its pixel in the plot widget.
    struct DrawnPoint {
        QString series;
        double step;
        double value;
        QPointF pixel;
    };
    std::vector<DrawnPoint> drawnPoints() const
    {
        std::vector<DrawnPoint> points;
        for (const auto& [name, graph] : graphs) {
            for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
                points.push_back({name, it->key, it->value, {plot->xAxis->coordToPixel(it->key), plot->yAxis->coordToPixel(it->value)}});
            if (const auto found = floorPoints.find(graph); found != floorPoints.end()) {
                const QCPGraph* markers = found->second.first;
                for (auto it = markers->data()->constBegin(); it != markers->data()->constEnd(); ++it)
                    points.push_back({name, it->key, 0.0, {plot->xAxis->coordToPixel(it->key), plot->yAxis->coordToPixel(it->value)}});
            }
        }
        return points;
    }

    QString stepText(double step) const
    {
        const double index = std::round(step);
        if (index == step && index >= 0 && index < stepNames.size())
            return stepNames[int(index)];
        return QStringLiteral("%1 %2").arg(plot->xAxis->label()).arg(step, 0, 'g', 6);
    }

    bool hasFloorPoints() const
    {
        for (const auto& [graph, points] : floorPoints)
            if (!points.second.isEmpty())
                return true;
        return false;
    }

    // Markers at a tenth of the smallest positive value drawn (1 when there is none).
    void placeFloorPoints()
    {
        double smallest = std::numeric_limits<double>::infinity();
        for (const auto& entry : graphs)
            for (auto it = entry.second->data()->constBegin(); it != entry.second->data()->constEnd(); ++it)
                if (it->value > 0)
                    smallest = std::min(smallest, it->value);
        const double floor = std::isfinite(smallest) ? smallest / 10 : 1.0;
        for (auto& [graph, points] : floorPoints) {
            QVector<double> values(points.second.size(), floor);
            points.first->setData(points.second, values);
        }
        // With no positive value the markers' height means nothing: said (they read as 1.0 everywhere, GUI probe).
        const QString floorNote = !hasFloorPoints()          ? QString()
                                  : std::isfinite(smallest) ? QObject::tr(" (○ = 0)")   // short: charts are small
                                                            : QObject::tr(" (○ = 0: all are)");
        plot->yAxis->setLabel(valueLabel + floorNote);
    }

    static QCPScatterStyle floorMarker(int colourIndex)
    {
        return QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(plot::seriesColor(colourIndex), 1.8), Qt::NoBrush, 8);
    }

    QCPGraph* floorGraph(QCPGraph* graph, int colourIndex)
    {
        auto& entry = floorPoints[graph];
        if (!entry.first) {
            entry.first = plot->addGraph();
            entry.first->setLineStyle(QCPGraph::lsNone);
            entry.first->setScatterStyle(floorMarker(colourIndex));
            entry.first->removeFromLegend();
        }
        return entry.first;
    }

    int colourOf(const QString& series, int position) const
    {
        const auto found = styles.find(series);
        return found == styles.end() ? position : found->second.first;
    }

    QPen pen(const QString& series, int position) const
    {
        QPen line(plot::seriesColor(colourOf(series, position)), 1.8);
        if (const auto found = styles.find(series); found != styles.end() && found->second.second)
            line.setStyle(Qt::DashLine);
        return line;
    }

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
        for (size_t i = 0; i < graphs.size(); ++i) {
            graphs[i].second->setPen(pen(graphs[i].first, int(i)));
            if (const auto found = floorPoints.find(graphs[i].second); found != floorPoints.end())
                found->second.first->setScatterStyle(floorMarker(colourOf(graphs[i].first, int(i))));
        }
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
            placeFloorPoints();
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
            if (hasFloorPoints())   // markers at the first or last step would be cut in half by the axis
                plot->xAxis->scaleRange(1.06, plot->xAxis->range().center());
        }
        fitTickCount(plot->height());
        plot->replot(now ? QCustomPlot::rpImmediateRefresh : QCustomPlot::rpQueuedReplot);
    }

    // Value labels about two lines apart on an axis of the height the plot will have (`plotHeight`; its margins
    // as last laid out).
    void fitTickCount(int plotHeight)
    {
        const QRect area = plot->axisRect()->rect();
        const int margins = area.height() > 0 && plot->height() > area.height() ? plot->height() - area.height() : 80;
        const double line = QFontMetricsF(plot->yAxis->tickLabelFont()).height();
        const int count = std::clamp(int((plotHeight - margins) / (1.8 * line)), 2, 6);
        logTicker->setTickCount(count);
        evenTicker->setTickCount(count);
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

    // Hovering a point says what it is (a tooltip event of the plot, so that the widget's own tooltip does not replace
    // it a moment later, GUI probe).
    m->plot->installEventFilter(this);

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
        graph->setPen(m->pen(series, int(m->graphs.size())));
        m->graphs.emplace_back(series, graph);
    }
    if (m->logarithmic && value <= 0) {
        const int position = int(std::find_if(m->graphs.begin(), m->graphs.end(), [&](const auto& e) { return e.second == graph; }) - m->graphs.begin());
        m->floorGraph(graph, m->colourOf(series, position));
        m->floorPoints[graph].second.push_back(step);
    } else {
        graph->addData(step, value);  // appending in key order is O(1)
    }
    if (!m->replotTimer->isActive())
        m->replotTimer->start();
}

void LossCurve::clear()
{
    m->replotTimer->stop();
    m->stepNames.clear();
    m->styles.clear();
    m->plot->clearGraphs();
    m->graphs.clear();
    m->floorPoints.clear();
    m->plot->yAxis->setLabel(m->valueLabel);
    m->redraw();
}

void LossCurve::setAxisLabels(const QString& stepLabel, const QString& valueLabel)
{
    m->plot->xAxis->setLabel(stepLabel);
    m->valueLabel = valueLabel;
    m->plot->yAxis->setLabel(valueLabel);
    m->redraw();
}

void LossCurve::setLogScale(bool logarithmic)
{
    // Points already added move between the curve and the floor markers.
    if (logarithmic != m->logarithmic) {
        for (size_t i = 0; i < m->graphs.size(); ++i) {
            QCPGraph* graph = m->graphs[i].second;
            if (logarithmic) {
                QVector<double> steps;
                for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
                    if (it->value <= 0)
                        steps.push_back(it->key);
                if (!steps.isEmpty()) {
                    m->floorGraph(graph, m->colourOf(m->graphs[i].first, int(i)));
                    m->floorPoints[graph].second = steps;
                    QVector<double> keys, values;
                    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
                        if (it->value > 0) {
                            keys.push_back(it->key);
                            values.push_back(it->value);
                        }
                    graph->setData(keys, values, true);
                }
            } else if (const auto found = m->floorPoints.find(graph); found != m->floorPoints.end()) {
                for (double step : found->second.second)
                    graph->addData(step, 0.0);
                m->plot->removeGraph(found->second.first);
                m->floorPoints.erase(found);
            }
        }
        m->logarithmic = logarithmic;
    }
    m->plot->yAxis->setScaleType(logarithmic ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    m->plot->yAxis->setTicker(logarithmic ? m->logTicker.staticCast<QCPAxisTicker>() : m->evenTicker);
    m->redraw();
}

void LossCurve::setStepNames(const QStringList& names) { m->stepNames = names; }

QString LossCurve::pointTextAt(const QPoint& pos) const
{
    const QPointF inPlot = m->plot->mapFrom(this, pos);
    if (!m->plot->axisRect()->rect().contains(inPlot.toPoint()))
        return {};
    constexpr double kNearPixels = 8;
    const auto points = m->drawnPoints();
    const Private::DrawnPoint* nearest = nullptr;
    double nearestDistance = kNearPixels;
    for (const auto& point : points) {
        const double distance = std::hypot(point.pixel.x() - inPlot.x(), point.pixel.y() - inPlot.y());
        if (distance <= nearestDistance) {
            nearest = &point;
            nearestDistance = distance;
        }
    }
    if (!nearest)
        return {};
    // Every series at that step, in the order of the legend: a line drawn under another is named too.
    QStringList lines{m->stepText(nearest->step)};
    for (const auto& [name, graph] : m->graphs)
        for (const auto& point : points)
            if (point.series == name && point.step == nearest->step)
                lines << (name.isEmpty() ? m->valueLabel : name) + QStringLiteral(": ") + QString::number(point.value, 'g', 6);
    return lines.join(QLatin1Char('\n'));
}

void LossCurve::setSeriesStyle(const QString& series, int colourIndex, bool dashed)
{
    m->styles[series] = {colourIndex, dashed};
    m->applyPalette(palette());
    if (!m->replotTimer->isActive())
        m->replotTimer->start();
}

QColor LossCurve::seriesColor(const QString& series) const
{
    const QCPGraph* graph = m->find(series);
    return graph ? graph->pen().color() : QColor();
}

bool LossCurve::isDashed(const QString& series) const
{
    const QCPGraph* graph = m->find(series);
    return graph && graph->pen().style() == Qt::DashLine;
}

bool LossCurve::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m->plot && event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = pointTextAt(m->plot->mapTo(this, help->pos()));
        if (!text.isEmpty()) {
            // Shown while the pointer stays within a few pixels of where it was asked.
            QToolTip::showText(help->globalPos(), text, m->plot, QRect(help->pos() - QPoint(4, 4), QSize(9, 9)));
            return true;
        }
        // Not on a point: the widget's own tooltip, as a tooltip event of the plot would have shown.
    }
    return QWidget::eventFilter(watched, event);
}

QPoint LossCurve::pointPixel(const QString& series, double step) const
{
    for (const auto& point : m->drawnPoints())
        if (point.series == series && point.step == step)
            return m->plot->mapTo(this, point.pixel.toPoint());
    return {-1, -1};
}

int LossCurve::seriesCount() const { return int(m->graphs.size()); }

bool LossCurve::labelsDecades() const
{
    return m->plot->yAxis->ticker() == m->logTicker.staticCast<QCPAxisTicker>() && m->logTicker->decadesOnly;
}

QVector<double> LossCurve::valueTicks() const { return m->plot->yAxis->tickVector(); }

int LossCurve::valuePixel(double value) const
{
    return int(std::lround(m->plot->mapTo(this, QPointF(0, m->plot->yAxis->coordToPixel(value))).y()));
}

bool LossCurve::legendOutsidePlot() const { return m->plot->legend->layout() == m->plot->plotLayout(); }

int LossCurve::pointCount(const QString& series) const
{
    QCPGraph* graph = m->find(series);
    if (!graph)
        return 0;
    const auto found = m->floorPoints.find(graph);
    return graph->dataCount() + (found == m->floorPoints.end() ? 0 : int(found->second.second.size()));
}

std::pair<double, double> LossCurve::stepRange() const { return {m->plot->xAxis->range().lower, m->plot->xAxis->range().upper}; }
std::pair<double, double> LossCurve::valueRange() const { return {m->plot->yAxis->range().lower, m->plot->yAxis->range().upper}; }
QString LossCurve::valueAxisLabel() const { return m->plot->yAxis->label(); }

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

void LossCurve::resizeEvent(QResizeEvent* event)
{
    m->fitTickCount(event->size().height());
    QWidget::resizeEvent(event);
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
