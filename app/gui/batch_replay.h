#pragma once
// Run ▸ Replay as Batch: runs `cwb --batch PROJECT --out DIR` as a child process (the same binary), so the
// replay is exactly what a headless server does; its output lines and exit code come back as signals.
#include <QObject>
#include <QProcess>
#include <QString>

namespace cwb {

class BatchReplay : public QObject {
    Q_OBJECT
public:
    explicit BatchReplay(QObject* parent = nullptr);
    // `program` defaults to this executable.
    void start(const QString& project, const QString& outputDir, const QString& program = {});
    bool isRunning() const { return mProcess.state() != QProcess::NotRunning; }
    void cancel();
    // What `cwb --batch` exit codes mean, for the user.
    static QString describeExit(int code);

signals:
    void line(const QString& text);
    void finished(int exitCode);

private:
    QProcess mProcess;
};

} // namespace cwb
