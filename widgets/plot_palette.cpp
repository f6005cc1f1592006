#include "widgets/plot_palette.h"

#include <qcustomplot.h>

namespace cwb::plot {

void styleAxis(QCPAxis* axis, const QPalette& palette)
{
    if (!axis)
        return;
    const QColor text = palette.color(QPalette::WindowText);
    QColor grid = palette.color(QPalette::Mid);
    grid.setAlpha(90);
    axis->setBasePen(QPen(text, 1));
    axis->setTickPen(QPen(text, 1));
    axis->setSubTickPen(QPen(text, 1));
    axis->setTickLabelColor(text);
    axis->setLabelColor(text);
    axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    axis->grid()->setZeroLinePen(QPen(grid, 1, Qt::SolidLine));
}

void applyPalette(QCustomPlot* plot, const QPalette& palette)
{
    if (!plot)
        return;
    plot->setBackground(QBrush(palette.color(QPalette::Base)));
    for (QCPAxisRect* rect : plot->axisRects()) {
        rect->setBackground(QBrush(palette.color(QPalette::Base)));
        for (QCPAxis* axis : rect->axes())
            styleAxis(axis, palette);
    }
    if (plot->legend) {
        plot->legend->setBrush(QBrush(palette.color(QPalette::Base)));
        plot->legend->setBorderPen(QPen(palette.color(QPalette::Mid)));
        plot->legend->setTextColor(palette.color(QPalette::WindowText));
    }
    for (int i = 0; i < plot->plotLayout()->elementCount(); ++i) {
        if (auto* text = qobject_cast<QCPTextElement*>(plot->plotLayout()->elementAt(i)))
            text->setTextColor(palette.color(QPalette::WindowText));
    }
}

QColor seriesColor(int index)
{
    // Tableau-like qualitative colours: enough contrast against white and against dark grey.
    static const QColor colors[] = {
        QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
        QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48),
        QColor(0xb0, 0x7a, 0xa1), QColor(0xff, 0x9d, 0xa7), QColor(0x9c, 0x75, 0x5f),
    };
    const int count = int(sizeof(colors) / sizeof(colors[0]));
    return colors[((index % count) + count) % count];
}

}  // namespace cwb::plot
