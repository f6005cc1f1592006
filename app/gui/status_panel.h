#pragma once
// The status bar's permanent fields: the compute device (CPU, or the CUDA GPU's name), the process's resident
// memory (refreshed every two seconds), and the running job.
#include <QObject>
#include <QString>

class QLabel;
class QStatusBar;
class QTimer;

namespace cwb {

class StatusPanel : public QObject {
    Q_OBJECT
public:
    explicit StatusPanel(QStatusBar* bar);
    void setJob(const QString& title);   // empty: idle
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
};

} // namespace cwb
