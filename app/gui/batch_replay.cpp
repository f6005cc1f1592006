#include "app/gui/batch_replay.h"

#include <QCoreApplication>

namespace cwb {

BatchReplay::BatchReplay(QObject* parent) : QObject(parent) {
    mProcess.setProcessChannelMode(QProcess::MergedChannels);
    connect(&mProcess, &QProcess::readyRead, this, [this] {
        while (mProcess.canReadLine()) emit line(QString::fromUtf8(mProcess.readLine()).trimmed());
    });
    connect(&mProcess, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
        const QString rest = QString::fromUtf8(mProcess.readAll()).trimmed();
        if (!rest.isEmpty()) emit line(rest);
        emit finished(status == QProcess::NormalExit ? code : -1);
    });
    connect(&mProcess, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
        if (error == QProcess::FailedToStart) {
            emit line(tr("could not start %1").arg(mProcess.program()));
            emit finished(-1);
        }
    });
}

void BatchReplay::start(const QString& project, const QString& outputDir, const QString& program) {
    mProcess.start(program.isEmpty() ? QCoreApplication::applicationFilePath() : program,
                   {QStringLiteral("--batch"), project, QStringLiteral("--out"), outputDir});
}

void BatchReplay::cancel() {
    if (isRunning()) mProcess.terminate();
}

QString BatchReplay::describeExit(int code) {
    switch (code) {
    case 0: return tr("reproduced: every stored result was rebuilt and matches");
    case 1: return tr("differs: a result is beyond tolerance or a variant has no stored results (see report.md)");
    case 2: return tr("error: the replay could not run (see the log)");
    default: return tr("stopped (exit %1)").arg(code);
    }
}

} // namespace cwb
