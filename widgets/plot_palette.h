#pragma once
// Internal helpers shared by the cwb widgets: colours a QCustomPlot from a QPalette (light/dark).
// Only forward declarations here, so including this header never pulls in qcustomplot.h.

#include <QColor>
#include <QPalette>

class QCustomPlot;
class QCPAxis;

namespace cwb::plot {

// Background, axes, tick labels, grid, legend and text elements of `plot` from `palette`.
void applyPalette(QCustomPlot* plot, const QPalette& palette);
// One axis (also used for a colour scale's axis, which lives outside the axis rects).
void styleAxis(QCPAxis* axis, const QPalette& palette);
// The i-th colour of a qualitative series palette, readable on both light and dark backgrounds.
QColor seriesColor(int index);

}  // namespace cwb::plot
