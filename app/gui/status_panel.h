#pragma once
// The status bar's permanent fields: the compute device (CPU, or the CUDA GPU's name), the process's resident
// memory (refreshed every two seconds), and the running job.
#include <QObject>
#include <QString>

#include <utility>
#include <vector>

class QLabel;
class QStatusBar;
class QTimer;

namespace cwb {

class StatusPanel : public QObject {
    Q_OBJECT
public:
    explicit StatusPanel(QStatusBar* bar);
    // The running jobs by key ("run", "importance", "load", ...): an empty title ends that one. Shows the latest
    // started and how many more run beside it ("idle" when none); the tooltip lists them all.
    void setJob(const QString& key, const QString& title);
    QString deviceText() const;
    QString memoryText() const;
    QString jobText() const;

    static QString deviceDescription();   // "CPU · 16 threads" or "CUDA (float16): NVIDIA H200"
    void refreshDevice();                 // after Run ▸ Compute On changed
    static double residentBytes();        // 0 when unknown

private:
    void refreshMemory();
    QLabel* mDevice;
    QLabel* mMemory;
    QLabel* mJob;
    QTimer* mTimer;
    std::vector<std::pair<QString, QString>> mJobs;   // key, title; in the order they started
};

} // namespace cwb
