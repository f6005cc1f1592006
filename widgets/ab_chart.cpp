#include "widgets/ab_chart.h"

#include "widgets/plot_palette.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QLocale>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

namespace cwb {

namespace {

QFont titleFont(QFont font)
{
    font.setBold(true);
    if (font.pointSizeF() > 0)
        font.setPointSizeF(font.pointSizeF() + 1);
    return font;
}

constexpr double kBarWidth = 0.6;

bool hasError(const AbSeries& series) { return std::isfinite(series.error) && series.error > 0; }

QString formatLabel(double value)
{
    if (!std::isfinite(value))
        return QStringLiteral("n/a");
    return QString::number(value, 'g', 4);
}

}  // namespace

struct AbChart::Private {
    QCustomPlot* plot = nullptr;
    QCPTextElement* title = nullptr;
    QSharedPointer<QCPAxisTickerText> ticker;
    QString metric;
    QString unit;
    std::vector<AbSeries> series;
    bool firstIsBaseline = true;
    std::vector<QCPBars*> bars;  // one per series, key = index
    std::vector<QCPErrorBars*> errorBars;
    std::vector<QCPItemText*> labels;

    void clearPlottables()
    {
        plot->clearPlottables();  // deletes bars and error bars
        plot->clearItems();
        bars.clear();
        errorBars.clear();
        labels.clear();
    }

    void applyPalette(const QPalette& palette)
    {
        plot::applyPalette(plot, palette);
        plot->xAxis->grid()->setVisible(false);
        const QColor text = palette.color(QPalette::WindowText);
        const QColor baseline = palette.color(QPalette::Mid);
        for (size_t i = 0; i < bars.size(); ++i) {
            const int colour = i < series.size() && series[i].colour >= 0 ? series[i].colour : int(i) - (firstIsBaseline ? 1 : 0);
            const QColor fill = i == 0 && firstIsBaseline ? baseline : plot::seriesColor(colour);
            bars[i]->setPen(QPen(fill.darker(130)));
            // Stale results looked like fresh ones beside them (GUI probe): hatched, on a pale fill.
            if (i < series.size() && series[i].stale) {
                QColor pale = fill;
                pale.setAlpha(70);
                bars[i]->setBrush(QBrush(pale, Qt::BDiagPattern));
            } else {
                bars[i]->setBrush(fill);
            }
        }
        for (QCPErrorBars* errors : errorBars)
            errors->setPen(QPen(text, 1.5));
        for (QCPItemText* label : labels)
            label->setColor(text);
    }

    void rebuild(const QPalette& palette)
    {
        clearPlottables();
        title->setText(unit.isEmpty() ? metric : QStringLiteral("%1 (%2)").arg(metric, unit));
        plot->yAxis->setLabel(unit.isEmpty() ? metric : unit);

        QVector<double> ticks;
        QVector<QString> tickLabels;
        double lo = 0.0;
        double hi = 0.0;
        for (size_t i = 0; i < series.size(); ++i) {
            const AbSeries& s = series[i];
            const double key = double(i);
            ticks << key;
            tickLabels << (i == 0 && firstIsBaseline ? s.variant + QStringLiteral("\n(baseline)") : s.variant);

            auto* bar = new QCPBars(plot->xAxis, plot->yAxis);
            bar->setName(s.variant);
            bar->setWidth(kBarWidth);
            if (std::isfinite(s.value))
                bar->addData(key, s.value);
            bars.push_back(bar);

            const double err = hasError(s) ? s.error : 0.0;
            if (err > 0 && std::isfinite(s.value)) {
                auto* errors = new QCPErrorBars(plot->xAxis, plot->yAxis);
                errors->removeFromLegend();
                errors->setDataPlottable(bar);
                errors->setData(QVector<double>{err});
                errors->setWhiskerWidth(10);
                errorBars.push_back(errors);
            }

            const double top = std::isfinite(s.value) ? s.value + (s.value >= 0 ? err : -err) : 0.0;
            lo = std::min(lo, top);
            hi = std::max(hi, top);
            auto* label = new QCPItemText(plot);
            label->setText(formatLabel(s.value));
            label->setClipToAxisRect(false);
            label->position->setType(QCPItemPosition::ptPlotCoords);
            const bool negative = std::isfinite(s.value) && s.value < 0;
            label->setPositionAlignment(Qt::AlignHCenter | (negative ? Qt::AlignTop : Qt::AlignBottom));
            label->position->setCoords(key, std::isfinite(s.value) ? top : 0.0);
            label->setPadding(QMargins(0, 2, 0, 2));
            labels.push_back(label);
        }
        ticker->setTicks(ticks, tickLabels);
        plot->xAxis->setRange(-0.5, std::max<double>(double(series.size()), 1.0) - 0.5);
        const double span = hi - lo > 0 ? hi - lo : 1.0;
        // Head room for the value labels above (below) the bars.
        const double bottom = lo < 0 ? lo - 0.15 * span : 0.0;
        const double top = hi > 0 ? hi + 0.15 * span : (lo < 0 ? 0.0 : 1.0);
        plot->yAxis->setRange(bottom, top);
        applyPalette(palette);
        plot->replot(QCustomPlot::rpQueuedReplot);
    }
};

AbChart::AbChart(QWidget* parent) : QWidget(parent), m(std::make_unique<Private>())
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m->plot = new QCustomPlot(this);
    layout->addWidget(m->plot);

    m->plot->plotLayout()->insertRow(0);
    m->title = new QCPTextElement(m->plot, QString(), titleFont(font()));
    m->plot->plotLayout()->addElement(0, 0, m->title);
    m->ticker = QSharedPointer<QCPAxisTickerText>::create();
    m->plot->xAxis->setTicker(m->ticker);
    m->plot->xAxis->setSubTicks(false);
    m->plot->xAxis->setTickLength(0, 4);
    m->rebuild(palette());
}

AbChart::~AbChart() = default;

void AbChart::setMetric(const QString& metric, const QString& unit, const std::vector<AbSeries>& series, bool firstIsBaseline)
{
    m->metric = metric;
    m->unit = unit;
    m->series = series;
    m->firstIsBaseline = firstIsBaseline && !series.empty();
    m->rebuild(palette());
}

bool AbChart::hasBaseline() const { return m->firstIsBaseline; }

void AbChart::clear() { setMetric(QString(), QString(), {}); }

QString AbChart::metric() const { return m->metric; }

QString AbChart::unit() const { return m->unit; }

int AbChart::seriesCount() const { return int(m->bars.size()); }

double AbChart::barValue(int index) const
{
    if (index < 0 || index >= seriesCount() || m->bars[size_t(index)]->data()->isEmpty())
        return std::numeric_limits<double>::quiet_NaN();
    return m->bars[size_t(index)]->data()->constBegin()->value;
}

double AbChart::barError(int index) const
{
    if (index < 0 || index >= seriesCount())
        return 0.0;
    for (QCPErrorBars* errors : m->errorBars) {
        if (errors->dataPlottable() == m->bars[size_t(index)] && errors->dataCount() > 0)
            return errors->data()->at(0).errorPlus;
    }
    return 0.0;
}

QString AbChart::variantName(int index) const
{
    return index >= 0 && index < int(m->series.size()) ? m->series[size_t(index)].variant : QString();
}

bool AbChart::isDrawnStale(int index) const
{
    return index >= 0 && index < int(m->bars.size()) && index < int(m->series.size()) && m->series[size_t(index)].stale &&
           m->bars[size_t(index)]->brush().style() == Qt::BDiagPattern;
}

bool AbChart::hasErrorBars() const { return !m->errorBars.empty(); }

QColor AbChart::barColor(int index) const
{
    if (index < 0 || index >= int(m->bars.size()))
        return {};
    return m->bars[size_t(index)]->pen().color();
}

bool AbChart::savePng(const QString& path, int width, int height)
{
    if (width <= 0 || height <= 0)
        return false;
    return m->plot->savePng(path, width, height, 1.0);
}

void AbChart::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange) {
        m->applyPalette(palette());
        m->plot->replot(QCustomPlot::rpQueuedReplot);
    }
    QWidget::changeEvent(event);
}

}  // namespace cwb
