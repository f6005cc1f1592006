#include "widgets/importance_heatmap.h"

#include "widgets/plot_palette.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QFontMetricsF>
#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QToolTip>
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

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Perceptually uniform, colour-blind safe (viridis stops); NaN cells are transparent.
QCPColorGradient viridis()
{
    QCPColorGradient gradient;
    gradient.clearColorStops();
    gradient.setColorStopAt(0.00, QColor(68, 1, 84));
    gradient.setColorStopAt(0.25, QColor(59, 82, 139));
    gradient.setColorStopAt(0.50, QColor(33, 145, 140));
    gradient.setColorStopAt(0.75, QColor(94, 201, 98));
    gradient.setColorStopAt(1.00, QColor(253, 231, 37));
    gradient.setColorInterpolation(QCPColorGradient::ciRGB);
    gradient.setNanHandling(QCPColorGradient::nhTransparent);
    return gradient;
}

}  // namespace

struct ImportanceHeatmap::Private {
    QCustomPlot* plot = nullptr;
    QCPColorMap* map = nullptr;
    QCPColorScale* scale = nullptr;
    QCPItemRect* selection = nullptr;
    std::vector<QCPItemRect*> marks;
    QCPTextElement* title = nullptr;
    QSharedPointer<QCPAxisTickerText> xTicker;
    QSharedPointer<QCPAxisTickerText> yTicker;
    HeatmapData data;
    int selectedRow = -1;
    int selectedColumn = -1;
    int pressedRow = -1;
    int pressedColumn = -1;
    int hoveredRow = -1;
    int hoveredColumn = -1;
    // The plot lays itself out only when it replots; coordinate queries force that when stale.
    mutable bool layoutDirty = true;

    int rows() const { return int(data.rowLabels.size()); }
    int columns() const { return int(data.columnLabels.size()); }
    bool validCell(int row, int column) const
    {
        return row >= 0 && column >= 0 && row < rows() && column < columns();
    }

    // Tick labels as drawn. Where every label would overlap its neighbours only every step-th is shown (a channel map
    // has hundreds of columns, a 70B model 80 blocks; the tooltip and the keyboard still name each cell); column labels
    // are turned 45° only where that shows more of them; a turned last label gets the room it runs into on the right
    // (it ran under the colour scale, GUI probe).
    struct LabelLayout {
        int columnStep = 1;
        int rowStep = 1;
        bool rotated = false;
        int rightMargin = 0;
        bool operator==(const LabelLayout& other) const
        {
            return columnStep == other.columnStep && rowStep == other.rowStep && rotated == other.rotated
                && rightMargin == other.rightMargin;
        }
        bool operator!=(const LabelLayout& other) const { return !(*this == other); }
    };
    LabelLayout labels;
    QMargins baseMargins;
    int refits = 0;   // label re-fits since the last resize or data change; bounded in case they oscillate

    // The smallest step of 1, 2, 5, 10, 20, 50... at which labels `labelPixels` apart fit cells `cellPixels` wide.
    static int labelStep(int count, double cellPixels, double labelPixels)
    {
        if (count <= 1 || !(cellPixels > 0))
            return 1;
        for (int base = 1; base < count; base *= 10)
            for (int multiple : {1, 2, 5})
                if (multiple * base * cellPixels >= labelPixels)
                    return multiple * base;
        return count;
    }

    // The label layout that fits the axis rect of the last replot.
    LabelLayout fitLabels() const
    {
        LabelLayout fit;
        const QRect area = plot->axisRect()->rect();
        const int c = columns();
        const int r = rows();
        if (c == 0 || r == 0 || area.width() <= 0 || area.height() <= 0)
            return fit;
        const QFontMetricsF xMetrics(plot->xAxis->tickLabelFont());
        const QFontMetricsF yMetrics(plot->yAxis->tickLabelFont());
        double widest = 0;
        for (const QString& label : data.columnLabels)
            widest = std::max(widest, xMetrics.horizontalAdvance(label));
        const double cellWidth = double(area.width()) / c;
        const double line = xMetrics.height();
        const double diagonal = std::sqrt(0.5);
        const int flat = labelStep(c, cellWidth, widest + line / 2);
        const int turned = labelStep(c, cellWidth, line / diagonal + 2);   // 45°: neighbours a line apart
        fit.rotated = turned < flat;
        fit.columnStep = fit.rotated ? turned : flat;
        fit.rowStep = labelStep(r, double(area.height()) / r, yMetrics.height() + 1);
        if (fit.rotated) {
            // QCustomPlot turns a bottom label about its top left corner, shifted right by half its height's sine.
            const int last = (c - 1) / fit.columnStep * fit.columnStep;
            const double reach = xMetrics.horizontalAdvance(data.columnLabels.at(last)) * diagonal + line * diagonal / 2;
            const double room = (c - last - 0.5) * cellWidth;
            fit.rightMargin = std::max(0, int(std::ceil(reach - room)) + 4);
        }
        return fit;
    }

    void applyLabels(const LabelLayout& fit)
    {
        labels = fit;
        QVector<double> xTicks;
        QVector<QString> xLabels;
        for (int i = 0; i < columns(); i += fit.columnStep) {
            xTicks << i;
            xLabels << data.columnLabels.at(i);
        }
        QVector<double> yTicks;
        QVector<QString> yLabels;
        for (int i = 0; i < rows(); i += fit.rowStep) {
            yTicks << i;
            yLabels << data.rowLabels.at(i);
        }
        xTicker->setTicks(xTicks, xLabels);
        yTicker->setTicks(yTicks, yLabels);
        plot->xAxis->setTickLabelRotation(fit.rotated ? 45 : 0);
        QMargins margins = baseMargins;
        margins.setRight(std::max(margins.right(), fit.rightMargin));
        plot->axisRect()->setMinimumMargins(margins);
        layoutDirty = true;
    }

    // After each replot: the labels follow the axis rect it laid out.
    void refitLabels()
    {
        if (refits >= 4)
            return;
        const LabelLayout fit = fitLabels();
        if (fit == labels)
            return;
        ++refits;
        applyLabels(fit);
        plot->replot(QCustomPlot::rpQueuedReplot);
    }

    void ensureLayout() const
    {
        // A replot may re-fit the labels, which moves the grid: lay out again until it stands.
        for (int pass = 0; pass < 6 && (layoutDirty || plot->viewport() != plot->rect()); ++pass) {
            layoutDirty = false;
            plot->setViewport(plot->rect());
            plot->replot(QCustomPlot::rpImmediateRefresh);
        }
    }

    // Plot-widget pixel -> cell; false outside the grid.
    bool cellAtPlotPos(const QPointF& pos, int* row, int* column) const
    {
        if (rows() == 0 || columns() == 0 || !plot->axisRect()->rect().contains(pos.toPoint()))
            return false;
        const double key = plot->xAxis->pixelToCoord(pos.x());
        const double value = plot->yAxis->pixelToCoord(pos.y());
        const int c = int(std::floor(key + 0.5));
        const int r = int(std::floor(value + 0.5));
        if (!validCell(r, c))
            return false;
        *row = r;
        *column = c;
        return true;
    }

    QString toolTip(int row, int column) const
    {
        if (!validCell(row, column))
            return {};
        const double v = data.values[size_t(row) * size_t(columns()) + size_t(column)];
        QString text = data.rowLabels.at(row) + QStringLiteral(" · ") + data.columnLabels.at(column)
            + QLatin1Char('\n') + formatValue(v);
        if (!std::isnan(v) && !data.unit.isEmpty())
            text += QLatin1Char(' ') + data.unit;
        return text;
    }

    // Red, which the viridis scale never shows, so a mark stands out on dark and light cells alike.
    static QPen markPen(const QPalette&) { return QPen(QColor(230, 40, 40), 2, Qt::DashLine); }

    void updateSelectionItem()
    {
        const bool visible = validCell(selectedRow, selectedColumn);
        selection->setVisible(visible);
        if (visible) {
            selection->topLeft->setCoords(selectedColumn - 0.5, selectedRow - 0.5);
            selection->bottomRight->setCoords(selectedColumn + 0.5, selectedRow + 0.5);
        }
    }

    void applyPalette(const QPalette& palette)
    {
        plot::applyPalette(plot, palette);
        plot::styleAxis(scale->axis(), palette);
        plot->xAxis->grid()->setVisible(false);
        plot->yAxis->grid()->setVisible(false);
        selection->setPen(QPen(palette.color(QPalette::Highlight), 3));
        selection->setBrush(Qt::NoBrush);
        for (QCPItemRect* mark : marks)
            mark->setPen(markPen(palette));
        layoutDirty = true;
    }

    void rebuild()
    {
        const int r = rows();
        const int c = columns();
        title->setText(data.title);
        title->setVisible(!data.title.isEmpty());
        scale->axis()->setLabel(data.unit);

        map->data()->clear();
        if (r > 0 && c > 0) {
            // QCustomPlot draws no cell along a dimension of one (its range has no width: a one-block model's map was
            // empty, GUI probe). Such a dimension is stored as two equal halves of the one cell's span instead.
            const int cells = c == 1 ? 2 : c, lines = r == 1 ? 2 : r;
            map->data()->setSize(cells, lines);
            map->data()->setRange(c == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, c - 1), r == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, r - 1));
            double lo = std::numeric_limits<double>::infinity();
            double hi = -lo;
            for (int row = 0; row < lines; ++row) {
                for (int column = 0; column < cells; ++column) {
                    const double v = data.values[size_t(r == 1 ? 0 : row) * size_t(c) + size_t(c == 1 ? 0 : column)];
                    map->data()->setCell(column, row, v);
                    if (std::isfinite(v)) {
                        lo = std::min(lo, v);
                        hi = std::max(hi, v);
                    }
                }
            }
            if (!(lo <= hi)) {  // nothing finite
                lo = 0;
                hi = 1;
            } else if (lo == hi) {
                const double pad = lo == 0 ? 0.5 : std::abs(lo) * 0.05;
                lo -= pad;
                hi += pad;
            }
            map->setDataRange(QCPRange(lo, hi));
            map->setVisible(true);
            scale->setVisible(true);
        } else {
            // No map, no colour scale: it kept the last map's range, or showed 0–6 over nothing (GUI probe).
            map->setVisible(false);
            scale->setVisible(false);
        }

        // With a 1-cell map the QCP range would be empty; the axes always span whole cells.
        plot->xAxis->setRange(-0.5, std::max(c, 1) - 0.5);
        plot->yAxis->setRange(-0.5, std::max(r, 1) - 0.5);
        refits = 0;
        applyLabels(fitLabels());
        updateSelectionItem();
        layoutDirty = true;
        plot->replot(QCustomPlot::rpQueuedReplot);
    }
};

ImportanceHeatmap::ImportanceHeatmap(QWidget* parent) : QWidget(parent), m(std::make_unique<Private>())
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    setFocusPolicy(Qt::StrongFocus);   // Tab reaches the map; a click on the plot focuses it too
    m->plot = new QCustomPlot(this);
    m->plot->setFocusPolicy(Qt::NoFocus);
    m->plot->setMouseTracking(true);
    m->plot->installEventFilter(this);
    layout->addWidget(m->plot);

    QCustomPlot* plot = m->plot;
    plot->plotLayout()->insertRow(0);
    m->title = new QCPTextElement(plot, QString(), titleFont(font()));
    plot->plotLayout()->addElement(0, 0, m->title);
    m->title->setVisible(false);

    m->xTicker = QSharedPointer<QCPAxisTickerText>::create();
    m->yTicker = QSharedPointer<QCPAxisTickerText>::create();
    plot->xAxis->setTicker(m->xTicker);
    plot->yAxis->setTicker(m->yTicker);
    plot->xAxis->setSubTicks(false);
    plot->yAxis->setSubTicks(false);
    plot->xAxis->setTickLength(0, 3);
    plot->yAxis->setTickLength(0, 3);
    plot->yAxis->setRangeReversed(true);  // row 0 at the top, like a table

    m->map = new QCPColorMap(plot->xAxis, plot->yAxis);
    m->map->setInterpolate(false);
    m->map->setTightBoundary(false);

    m->scale = new QCPColorScale(plot);
    m->scale->setType(QCPAxis::atRight);
    plot->plotLayout()->addElement(1, 1, m->scale);
    m->map->setColorScale(m->scale);
    m->scale->setGradient(viridis());  // after attaching: the scale pushes its gradient onto the map
    // Keep the scale as tall as the grid.
    auto* margins = new QCPMarginGroup(plot);
    plot->axisRect()->setMarginGroup(QCP::msTop | QCP::msBottom, margins);
    m->scale->setMarginGroup(QCP::msTop | QCP::msBottom, margins);

    m->baseMargins = plot->axisRect()->minimumMargins();
    connect(plot, &QCustomPlot::afterReplot, this, [this] { m->refitLabels(); });

    m->selection = new QCPItemRect(plot);
    m->selection->setClipToAxisRect(true);
    m->selection->setVisible(false);

    m->applyPalette(palette());
    m->rebuild();
}

ImportanceHeatmap::~ImportanceHeatmap() = default;

bool ImportanceHeatmap::setScores(const HeatmapData& data)
{
    const size_t expected = size_t(data.rowLabels.size()) * size_t(data.columnLabels.size());
    if (data.values.size() != expected) {
        const QString reason = QStringLiteral("heatmap '%1': %2 values for %3 rows × %4 columns")
                                   .arg(data.title)
                                   .arg(data.values.size())
                                   .arg(data.rowLabels.size())
                                   .arg(data.columnLabels.size());
        emit scoresRejected(reason);
        return false;
    }
    m->data = data;
    m->selectedRow = m->selectedColumn = -1;
    m->pressedRow = m->pressedColumn = -1;
    m->hoveredRow = m->hoveredColumn = -1;
    m->rebuild();
    return true;
}

const HeatmapData& ImportanceHeatmap::scores() const { return m->data; }

void ImportanceHeatmap::clear() { setScores(HeatmapData{}); }

int ImportanceHeatmap::rowCount() const { return m->rows(); }

bool ImportanceHeatmap::colorScaleShown() const { return m->scale->visible(); }

int ImportanceHeatmap::columnCount() const { return m->columns(); }

namespace {
QStringList everyStep(const QStringList& labels, int step)
{
    QStringList shown;
    for (int i = 0; i < labels.size(); i += step)
        shown << labels.at(i);
    return shown;
}
}  // namespace

QStringList ImportanceHeatmap::shownColumnLabels() const
{
    m->ensureLayout();
    return everyStep(m->data.columnLabels, m->labels.columnStep);
}

QStringList ImportanceHeatmap::shownRowLabels() const
{
    m->ensureLayout();
    return everyStep(m->data.rowLabels, m->labels.rowStep);
}

bool ImportanceHeatmap::columnLabelsTurned() const
{
    m->ensureLayout();
    return m->labels.rotated;
}

QRect ImportanceHeatmap::colorScaleRect() const
{
    if (!m->scale->visible())
        return {};
    m->ensureLayout();
    const QRect bar = m->scale->axis()->axisRect()->rect();
    return QRect(m->plot->mapTo(this, bar.topLeft()), bar.size());
}

double ImportanceHeatmap::value(int row, int column) const
{
    if (!m->validCell(row, column))
        return kNaN;
    return m->data.values[size_t(row) * size_t(m->columns()) + size_t(column)];
}

double ImportanceHeatmap::valueAt(const QPoint& widgetPos, int* row, int* column) const
{
    m->ensureLayout();
    int r = -1;
    int c = -1;
    const bool inside = m->cellAtPlotPos(m->plot->mapFrom(this, widgetPos), &r, &c);
    if (row)
        *row = inside ? r : -1;
    if (column)
        *column = inside ? c : -1;
    return inside ? value(r, c) : kNaN;
}

QPoint ImportanceHeatmap::cellCenter(int row, int column) const
{
    if (!m->validCell(row, column))
        return QPoint(-1, -1);
    m->ensureLayout();
    const QPointF center(m->plot->xAxis->coordToPixel(column), m->plot->yAxis->coordToPixel(row));
    return m->plot->mapTo(this, center.toPoint());
}

QString ImportanceHeatmap::toolTipAt(const QPoint& widgetPos) const
{
    int r = -1;
    int c = -1;
    valueAt(widgetPos, &r, &c);
    return m->toolTip(r, c);
}

QString ImportanceHeatmap::formatValue(double value)
{
    if (std::isnan(value))
        return QStringLiteral("no value");
    // Four significant digits: the shortest exact form gave 17 ("-0.03562109846999162", GUI probe); exact values are in
    // the project and `cwb project show --json`.
    return QString::number(value, 'g', 4);
}

void ImportanceHeatmap::selectCell(int row, int column)
{
    if (!m->validCell(row, column))
        row = column = -1;
    m->selectedRow = row;
    m->selectedColumn = column;
    m->updateSelectionItem();
    m->plot->replot(QCustomPlot::rpQueuedReplot);
}

void ImportanceHeatmap::keyPressEvent(QKeyEvent* event)
{
    const int rows = rowCount();
    const int columns = columnCount();
    if (rows == 0 || columns == 0)
        return QWidget::keyPressEvent(event);
    const bool none = !m->validCell(m->selectedRow, m->selectedColumn);
    int r = none ? 0 : m->selectedRow;
    int c = none ? 0 : m->selectedColumn;
    switch (event->key()) {
    case Qt::Key_Space:
    case Qt::Key_Return:
    case Qt::Key_Enter:
        if (none)
            break;   // the first key outlines a cell; the next picks it
        emit cellClicked(r, c, event->modifiers());
        return;
    case Qt::Key_Left: c -= none ? 0 : 1; break;
    case Qt::Key_Right: c += none ? 0 : 1; break;
    case Qt::Key_Up: r -= none ? 0 : 1; break;
    case Qt::Key_Down: r += none ? 0 : 1; break;
    case Qt::Key_Home: c = 0; break;
    case Qt::Key_End: c = columns - 1; break;
    case Qt::Key_PageUp: c -= 10; break;
    case Qt::Key_PageDown: c += 10; break;
    default:
        return QWidget::keyPressEvent(event);
    }
    r = std::clamp(r, 0, rows - 1);
    c = std::clamp(c, 0, columns - 1);
    selectCell(r, c);
    emit cellHovered(r, c);
    const QPoint center = cellCenter(r, c);
    if (isVisible() && center.x() >= 0)
        QToolTip::showText(mapToGlobal(center), m->toolTip(r, c), this);
}

void ImportanceHeatmap::setMarkedCells(const QVector<QRect>& cells)
{
    for (QCPItemRect* mark : m->marks)
        m->plot->removeItem(mark);
    m->marks.clear();
    for (const QRect& cell : cells) {
        auto* mark = new QCPItemRect(m->plot);
        mark->setClipToAxisRect(true);
        mark->setPen(Private::markPen(palette()));
        mark->setBrush(Qt::NoBrush);
        mark->topLeft->setCoords(cell.left() - 0.5, cell.top() - 0.5);
        mark->bottomRight->setCoords(cell.right() + 0.5, cell.bottom() + 0.5);
        m->marks.push_back(mark);
    }
    m->plot->replot(QCustomPlot::rpQueuedReplot);
}

int ImportanceHeatmap::markedCount() const { return int(m->marks.size()); }

int ImportanceHeatmap::selectedRow() const { return m->selectedRow; }

int ImportanceHeatmap::selectedColumn() const { return m->selectedColumn; }

void ImportanceHeatmap::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange) {
        m->applyPalette(palette());
        m->plot->replot(QCustomPlot::rpQueuedReplot);
    }
    QWidget::changeEvent(event);
}

// Mouse handling on the plot child: the plot's own signals come after QCustomPlot has processed the
// event, an event filter sees it first and independently of QCustomPlot's interactions.
bool ImportanceHeatmap::eventFilter(QObject* watched, QEvent* event)
{
    if (watched != m->plot)
        return QWidget::eventFilter(watched, event);
    switch (event->type()) {
    case QEvent::Resize:
        m->layoutDirty = true;
        m->refits = 0;
        break;
    case QEvent::MouseButtonPress: {
        auto* mouse = static_cast<QMouseEvent*>(event);
        m->pressedRow = m->pressedColumn = -1;
        if (mouse->button() == Qt::LeftButton) {
            m->ensureLayout();
            m->cellAtPlotPos(mouse->position(), &m->pressedRow, &m->pressedColumn);
        }
        break;
    }
    case QEvent::MouseButtonRelease: {
        auto* mouse = static_cast<QMouseEvent*>(event);
        if (mouse->button() == Qt::LeftButton && m->pressedRow >= 0) {
            m->ensureLayout();
            int r = -1;
            int c = -1;
            if (m->cellAtPlotPos(mouse->position(), &r, &c) && r == m->pressedRow && c == m->pressedColumn)
                emit cellClicked(r, c, mouse->modifiers());
        }
        m->pressedRow = m->pressedColumn = -1;
        break;
    }
    case QEvent::MouseMove: {
        auto* mouse = static_cast<QMouseEvent*>(event);
        int r = -1;
        int c = -1;
        m->cellAtPlotPos(mouse->position(), &r, &c);
        if (r != m->hoveredRow || c != m->hoveredColumn) {
            m->hoveredRow = r;
            m->hoveredColumn = c;
            emit cellHovered(r, c);
            if (r < 0)
                QToolTip::hideText();
            else if (QToolTip::isVisible())  // follow the mouse from cell to cell
                QToolTip::showText(mouse->globalPosition().toPoint(), m->toolTip(r, c), m->plot);
        }
        break;
    }
    case QEvent::ToolTip: {
        auto* help = static_cast<QHelpEvent*>(event);
        int r = -1;
        int c = -1;
        if (m->cellAtPlotPos(help->pos(), &r, &c))
            QToolTip::showText(help->globalPos(), m->toolTip(r, c), m->plot);
        else
            QToolTip::hideText();
        return true;
    }
    case QEvent::Leave:
        if (m->hoveredRow >= 0) {
            m->hoveredRow = m->hoveredColumn = -1;
            emit cellHovered(-1, -1);
        }
        break;
    default:
        break;
    }
    return QWidget::eventFilter(watched, event);
}

}  // namespace cwb
