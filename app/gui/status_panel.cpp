#include "app/gui/status_panel.h"

#include <QDir>

#include <algorithm>
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
    setJob({}, {});
    connect(mTimer, &QTimer::timeout, this, &StatusPanel::refreshMemory);
    mTimer->start(2000);
    refreshMemory();
}

void StatusPanel::setJob(const QString& key, const QString& title) {
    auto found = std::find_if(mJobs.begin(), mJobs.end(), [&](const auto& j) { return j.first == key; });
    if (title.isEmpty()) {
        if (found != mJobs.end()) mJobs.erase(found);
    } else if (found != mJobs.end()) {
        found->second = title;   // progress of a job already shown
    } else {
        mJobs.emplace_back(key, title);
    }
    if (mJobs.empty()) {
        mJob->setText(tr("idle"));
        mJob->setToolTip({});
        return;
    }
    const QString latest = mJobs.back().second;
    mJob->setText(mJobs.size() == 1 ? tr("▶ %1").arg(latest) : tr("▶ %1 (+%2 more)").arg(latest).arg(mJobs.size() - 1));
    QStringList all;
    for (const auto& j : mJobs) all << j.second;
    mJob->setToolTip(all.join('\n'));
}
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
