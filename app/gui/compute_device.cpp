#include "app/gui/compute_device.h"

#include <QDir>
#include <QFile>
#include <QSettings>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "core/util/error.h"

namespace cwb {

namespace {

const char* const kSettingsKey = "compute/device";

QString gpuName() {
    // The driver names the GPU in /proc; no CUDA headers needed in the GUI.
    for (const QString& gpu : QDir(QStringLiteral("/proc/driver/nvidia/gpus")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        QFile info(QStringLiteral("/proc/driver/nvidia/gpus/%1/information").arg(gpu));
        if (!info.open(QIODevice::ReadOnly)) continue;
        for (const QByteArray& line : info.readAll().split('\n'))
            if (line.startsWith("Model:")) return QString::fromUtf8(line.mid(6).trimmed());
    }
    return {};
}

} // namespace

bool cudaComputeAvailable() { return at::hasCUDA(); }

ComputeDevice guiComputeDevice() {
    const bool cuda = QSettings().value(kSettingsKey).toString() == QLatin1String("cuda");
    return cuda && cudaComputeAvailable() ? ComputeDevice::Cuda : ComputeDevice::Cpu;
}

void setGuiComputeDevice(ComputeDevice device) {
    if (device == ComputeDevice::Cuda && !cudaComputeAvailable())
        throw Error("CUDA is not available: this LibTorch has no CUDA or no GPU is visible");
    QSettings().setValue(kSettingsKey, device == ComputeDevice::Cuda ? "cuda" : "cpu");
}

RuntimeOptions guiRuntimeOptions() {
    RuntimeOptions options;
    if (guiComputeDevice() == ComputeDevice::Cuda) {
        options.device = at::Device(at::kCUDA);
        options.dtype = at::kHalf;
    }
    return options;
}

QString describeComputeDevice() {
    if (guiComputeDevice() == ComputeDevice::Cuda) {
        const QString name = gpuName();
        return name.isEmpty() ? QObject::tr("CUDA (float16)") : QObject::tr("CUDA (float16): %1").arg(name);
    }
    const int threads = at::get_num_threads();
    return threads == 1 ? QObject::tr("CPU · 1 thread") : QObject::tr("CPU · %1 threads").arg(threads);
}

} // namespace cwb
