#include "app/gui/status_panel.h"

#include <QDir>
#include <QFile>
#include <QLabel>
#include <QStatusBar>
#include <QTimer>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "app/gui/compute_device.h"
#include "core/model/model_info.h"

namespace cwb {

StatusPanel::StatusPanel(QStatusBar* bar)
    : QObject(bar), mDevice(new QLabel(bar)), mMemory(new QLabel(bar)), mJob(new QLabel(bar)), mTimer(new QTimer(this)) {
    mDevice->setText(deviceDescription());
    mDevice->setToolTip(tr("Where runs, latency measurements and generation compute (Run ▸ Compute On)"));
    mMemory->setToolTip(tr("Memory this process uses (resident set)"));
    bar->addPermanentWidget(mJob);
    bar->addPermanentWidget(mMemory);
    bar->addPermanentWidget(mDevice);
    setJob({});
    connect(mTimer, &QTimer::timeout, this, &StatusPanel::refreshMemory);
    mTimer->start(2000);
    refreshMemory();
}

void StatusPanel::setJob(const QString& title) { mJob->setText(title.isEmpty() ? tr("idle") : tr("▶ %1").arg(title)); }
QString StatusPanel::deviceText() const { return mDevice->text(); }
QString StatusPanel::memoryText() const { return mMemory->text(); }
QString StatusPanel::jobText() const { return mJob->text(); }

QString StatusPanel::deviceDescription() { return describeComputeDevice(); }

void StatusPanel::refreshDevice() { mDevice->setText(deviceDescription()); }

double StatusPanel::residentBytes() {
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly)) return 0;
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("VmRSS:")) return line.mid(6).trimmed().split(' ').front().toDouble() * 1024.0;
    return 0;
}

void StatusPanel::refreshMemory() {
    const double bytes = residentBytes();
    mMemory->setText(bytes > 0 ? tr("memory %1").arg(QString::fromStdString(humanBytes(bytes))) : tr("memory n/a"));
}

} // namespace cwb
