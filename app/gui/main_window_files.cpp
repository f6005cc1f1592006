// MainWindow's files: opening models and projects (in the background, with recovery of autosaves and locating a
// moved model), saving, and opening by drag and drop. The rest of the window is in main_window.cpp.
#include "app/gui/main_window.h"

#include <QApplication>
#include <QDateTime>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QLocale>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>

#include <cstdio>
#include <filesystem>

#include "app/gui/background_job.h"
#include "app/gui/pipeline_editor.h"
#include "app/gui/project_document.h"
#include "app/gui/recent_files.h"
#include "app/gui/status_panel.h"
#include "app/gui/step_layers_editor.h"
#include "core/project/project.h"
#include "core/util/error.h"
namespace cwb {

bool MainWindow::confirmUnappliedEdits(const QString& question, const QString& goOn) {
    if (!mDocument) return true;
    mPipeline->commitPendingEdits();   // typed but not applied: applied now where it can be
    // The selected step's, and those kept with other steps: saving and running went on without them, unasked (GUI probe).
    const QStringList unapplied = mPipeline->unappliedEdits();
    if (unapplied.isEmpty()) return true;
    QMessageBox box(QMessageBox::Warning, tr("Edits not applied"),
                    tr("The Layers box has edits that cannot be applied:\n%1\n\n%2").arg(unapplied.join('\n'), question),
                    QMessageBox::Cancel, this);
    QPushButton* go = box.addButton(goOn, QMessageBox::AcceptRole);
    box.setDefaultButton(QMessageBox::Cancel);
    box.exec();
    if (box.clickedButton() == go) return true;
    showTab(PipelineTab);
    return false;
}

bool MainWindow::maybeSave() {
    if (!mDocument) return true;
    // Typed in the Layers box but not applied: applied now, or (when it cannot be) said before it is lost.
    if (!confirmUnappliedEdits(tr("Go on without them?"), tr("Discard Them"))) return false;
    if (!mDocument->isDirty()) return true;
    const auto answer = QMessageBox::warning(this, tr("Unsaved changes"),
                                             tr("%1 has unsaved changes. Save them?").arg(mDocument->displayName()),
                                             QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel) return false;
    if (answer == QMessageBox::Save) return save();
    // Discarded: the autosave of these changes must not come back as "recovered" when the project is opened again.
    if (!mDocument->isUntitled()) Project::discardAutosave(mDocument->filePath().toStdString());
    return true;
}

QString MainWindow::openFailureAdvice(const QString& path) {
    const QFileInfo info(path);
    if (!(info.isFile() && info.suffix() == QLatin1String("cwbproj")))
        return tr("cwb reads GGUF files, Hugging Face folders (config.json + safetensors) and llama2.c .bin checkpoints.");
    try {
        Project::open(info.absoluteFilePath().toStdString(), Project::Access::ReadOnly);
    } catch (const std::exception&) {
        return tr("The project file itself cannot be read: check that it is a project written by cwb and not damaged "
                  "(an autosave beside it, %1.autosave, may hold the last state).").arg(info.fileName());
    }
    return tr("The project file reads; check that its model file is where it points (File ▸ Open Project offers to "
              "locate it) and that the model itself loads.");
}

bool MainWindow::openPath(const QString& path, bool interactive, const QString& modelPath) {
    if (interactive && (!maybeStopJobs() || !maybeSave())) return false;
    return openPathAsked(path, interactive, modelPath);
}

bool MainWindow::openPathAsked(const QString& path, bool interactive, const QString& modelPath) {
    const QFileInfo info(path);
    auto report = [this, interactive](const QString& what, const QString& detail, const QString& todo) {
        if (interactive) showError(what, detail, todo);
        else std::fprintf(stderr, "cwb: %s: %s\n", qPrintable(what), qPrintable(detail));
    };
    if (!info.exists()) {
        report(tr("Cannot open %1").arg(path), tr("The file or folder does not exist."), tr("Check the path and try again."));
        return false;
    }
    const bool isProject = info.isFile() && info.suffix() == QLatin1String("cwbproj");
    if (mLoading) {
        report(tr("Cannot open %1").arg(path), tr("Another model is still loading."), tr("Wait for it, then open again."));
        return false;
    }
    bool recover = false;
    if (isProject && interactive && Project::hasAutosave(info.absoluteFilePath().toStdString())) {
        // An autosave older than the file: the file was saved since (by a command, say). Saving a recovered state
        // over it is refused (the project's revision) and merged where the autosave records the file as it was read;
        // without that record recovering would take those saves back, so the default is then the saved file.
        const std::string file = info.absoluteFilePath().toStdString();
        const QFileInfo autosaved(QString::fromStdString(Project::autosavePath(file)));
        const bool newer = autosaved.lastModified() >= info.lastModified();
        bool mergeable = false;   // the autosave records the file as it was read, of the autosave's revision
        try {
            mergeable = Project::recoverAutosaveBase(file) != nullptr;
        } catch (const std::exception&) {
        }
        const auto answer = QMessageBox::question(
            this, tr("Recover unsaved changes?"),
            newer ? tr("%1 has autosaved changes newer than the saved file (the app may have stopped before saving). "
                       "Recover them?").arg(info.fileName())
                  : mergeable ? tr("%1 has autosaved changes, but the file was saved after them (by another program?). "
                                   "Recover them? Saving then offers to merge them with the file's changes.").arg(info.fileName())
                              : tr("%1 has autosaved changes, but the file was saved after them (by another program?). "
                                   "Recovering would go back to the autosaved state. Recover them anyway?").arg(info.fileName()),
            QMessageBox::Yes | QMessageBox::Discard, newer || mergeable ? QMessageBox::Yes : QMessageBox::Discard);
        if (answer == QMessageBox::Discard) Project::discardAutosave(info.absoluteFilePath().toStdString());
        recover = answer == QMessageBox::Yes;
    }
    // A moved or deleted model: found again here instead of leaving the project unopenable (GUI probe: only
    // `cwb project run --model` could use it then).
    QString relocated = modelPath;
    if (isProject && interactive && relocated.isEmpty()) relocated = locateMissingModel(info.absoluteFilePath(), recover);
    std::string recordedHash;
    if (!relocated.isEmpty()) {
        try {
            const std::string file = info.absoluteFilePath().toStdString();
            recordedHash = (recover ? Project::recoverAutosave(file) : Project::open(file)).model().hash;
        } catch (const std::exception&) {
        }
    }
    QString error;
    bool cancelled = false;
    std::unique_ptr<ProjectDocument> doc = loadInBackground(path, isProject, recover, &error, &cancelled, relocated);
    mLastOpenError = doc ? QString() : tr("%1: %2").arg(info.absoluteFilePath(), error);
    if (cancelled) {   // the user's own choice: no error dialog
        statusBar()->showMessage(tr("Opening %1 was cancelled").arg(info.fileName()), 5000);
        return false;
    }
    if (!doc) {
        report(tr("Cannot open %1").arg(info.fileName()), error, openFailureAdvice(path));
        return false;
    }
    mRecent->add(path);
    const bool located = !relocated.isEmpty() &&
                         doc->project().model().path == QFileInfo(relocated).absoluteFilePath().toStdString();
    setDocument(std::move(doc));
    statusBar()->showMessage(located ? tr("Opened %1 with its model at %2 (save to keep the new path)").arg(info.absoluteFilePath(), relocated)
                                     : tr("Opened %1").arg(info.absoluteFilePath()),
                             located ? 15000 : 5000);
    if (located && interactive && !recordedHash.empty() && mDocument->project().model().hash != recordedHash)
        QMessageBox::warning(this, tr("Not the same model"),
                             tr("%1 is not the model the project recorded (its bytes differ). The project now points at it; "
                                "results measured on the recorded model are marked out of date.").arg(relocated));
    return true;
}

QString MainWindow::locateMissingModel(const QString& projectPath, bool recovered) {
    std::string recorded;
    try {
        const std::string file = projectPath.toStdString();
        recorded = (recovered ? Project::recoverAutosave(file) : Project::open(file)).model().path;
    } catch (const std::exception&) {
        return {};   // the load says what is wrong with the project
    }
    std::error_code ec;
    if (recorded.empty() || std::filesystem::exists(recorded, ec)) return {};
    const QString missing = QString::fromStdString(recorded);
    const auto answer = QMessageBox::question(
        this, tr("Model not found"),
        tr("The project's model is not where it points:\n%1\n\nIt may have been moved or renamed. Locate it?").arg(missing),
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Yes);
    if (answer != QMessageBox::Yes) return {};
    // A file dialog picks files: a Hugging Face folder is given by its config.json.
    const QString chosen = QFileDialog::getOpenFileName(
        this, tr("Locate %1").arg(QFileInfo(missing).fileName()), QFileInfo(projectPath).absolutePath(),
        tr("Models (*.gguf *.bin config.json);;All files (*)"));
    if (chosen.isEmpty()) return {};
    return QFileInfo(chosen).fileName() == QLatin1String("config.json") ? QFileInfo(chosen).absolutePath() : chosen;
}

std::unique_ptr<ProjectDocument> MainWindow::loadInBackground(const QString& path, bool isProject, bool recover, QString* error,
                                                              bool* cancelledOut, const QString& modelPath) {
    // Reading a model can take long: a worker thread does it while this thread keeps the window painting and
    // answering (a busy bar in the status bar). The call returns when the load is done, so callers see the outcome.
    auto loaded = std::make_shared<ProjectDocument::Loaded>();
    BackgroundJob job(tr("Loading %1").arg(QFileInfo(path).fileName()), [loaded, path, isProject, recover, modelPath](Feedback& feedback) {
        *loaded = isProject ? ProjectDocument::loadProject(path, recover, &feedback, modelPath) : ProjectDocument::loadModel(path, &feedback);
    });
    // The job as context: progress still queued when it is destroyed is dropped, never read from a dead job.
    connect(&job, &BackgroundJob::progressChanged, &job, [this, title = job.title()](double fraction) {
        mStatus->setJob("load", tr("%1 (%2%)").arg(title).arg(int(fraction * 100)));
        emit loadingProgress(fraction);
    });
    QEventLoop loop;
    connect(&job, &BackgroundJob::finished, &loop, [&loop, error, cancelledOut](bool cancelled, const QString& failure) {
        if (cancelledOut) *cancelledOut = cancelled;
        if (cancelled) *error = tr("Loading was cancelled.");
        else if (!failure.isEmpty()) *error = failure;
        loop.quit();
    });
    mLoading = true;
    mLoadJob = &job;
    // The window paints and answers while the model loads, but the open project is about to be replaced: edits
    // made to it now would be dropped without a question (maybeSave asked before the load began).
    mTabs->setEnabled(false);
    for (QAction* a : mDocumentActions) a->setEnabled(false);
    mStatus->setJob("load", job.title());
    QApplication::setOverrideCursor(Qt::BusyCursor);
    emit loadingStarted(path);
    job.start();
    loop.exec();
    QApplication::restoreOverrideCursor();
    mStatus->setJob("load", {});
    mLoadJob = nullptr;
    mLoading = false;
    mTabs->setEnabled(true);
    for (QAction* a : mDocumentActions) a->setEnabled(mDocument != nullptr);
    if (!error->isEmpty() || !loaded->project) return nullptr;
    return ProjectDocument::fromLoaded(std::move(*loaded));
}

void MainWindow::offerRecovery() {
    for (const QString& folder : ProjectDocument::abandonedUntitledFolders()) {
        const QString autosaved = QDir(folder).entryList({QStringLiteral("*.cwbproj.autosave")}, QDir::Files).value(0);
        const QDateTime when = QFileInfo(folder + "/" + autosaved).lastModified();
        QMessageBox box(QMessageBox::Question, tr("Recover unsaved work?"),
                        tr("An untitled project (%1) was not saved when Compression Workbench last ended; its state "
                           "was autosaved at %2. Recover it?")
                            .arg(autosaved.section('.', 0, 0), QLocale().toString(when, QLocale::ShortFormat)),
                        QMessageBox::NoButton, this);
        QPushButton* recover = box.addButton(tr("Recover"), QMessageBox::AcceptRole);
        QPushButton* discard = box.addButton(tr("Discard"), QMessageBox::DestructiveRole);
        box.addButton(tr("Not Now"), QMessageBox::RejectRole);
        box.setDefaultButton(recover);
        box.exec();
        if (box.clickedButton() == discard) {
            ProjectDocument::discardAbandonedUntitled(folder);
        } else if (box.clickedButton() == recover) {
            if (recoverUntitled(folder)) return;   // one project per window
        }
    }
}

bool MainWindow::recoverUntitled(const QString& folder, bool interactive) {
    if (mLoading || (mDocument && interactive && (!maybeStopJobs() || !maybeSave()))) return false;
    try {
        auto doc = ProjectDocument::fromLoaded(ProjectDocument::loadAbandonedUntitled(folder));
        setDocument(std::move(doc));
    } catch (const std::exception& e) {
        if (interactive) showError(tr("Cannot recover the project"), QString::fromStdString(errorText(e)),
                                   tr("Its autosave stays in %1.").arg(folder));
        return false;
    }
    statusBar()->showMessage(tr("Recovered the untitled project; save it to keep it"), 8000);
    return true;
}

void MainWindow::cancelLoading() {
    if (mLoadJob) mLoadJob->cancel();
}

bool MainWindow::openRecent(const QString& path) {
    if (!QFileInfo::exists(path)) {
        // A file moved or deleted since: said before any question about the open project, and it can leave the list
        // (it stayed, with an error each time, GUI probe).
        const auto answer = QMessageBox::question(this, tr("Not found"),
                                                  tr("%1 no longer exists.\n\nRemove it from the recent files?").arg(path),
                                                  QMessageBox::Yes | QMessageBox::No, QMessageBox::Yes);
        if (answer == QMessageBox::Yes) mRecent->remove(path);
        return false;
    }
    return openPath(path);
}

bool MainWindow::closeDocument() {
    if (!mDocument || mLoading || !maybeStopJobs() || !maybeSave()) return false;
    setDocument(nullptr);
    return true;
}

void MainWindow::openDialog(bool project) {
    // Asked before the file is picked: the answer does not depend on which file (it came after the pick, GUI probe).
    if (!mLoading && (!maybeStopJobs() || !maybeSave())) return;
    const QString path = project ? QFileDialog::getOpenFileName(this, tr("Open Project"), {}, tr("Compression Workbench projects (*.cwbproj)"))
                                 : QFileDialog::getOpenFileName(this, tr("Open Model"), {},
                                                                tr("Models (*.gguf *.bin *.safetensors config.json);;All files (*)"));
    if (path.isEmpty()) return;
    // A Hugging Face model is its folder.
    const QFileInfo info(path);
    openPathAsked(!project && (info.suffix() == "safetensors" || info.fileName() == "config.json") ? info.absolutePath() : path, true);
}

bool MainWindow::save(ChangedFile whenChanged) {
    if (!mDocument) return false;
    if (!confirmUnappliedEdits(tr("Save without them?"), tr("Save Without Them"))) return false;
    if (mDocument->isUntitled()) return saveAs();
    try {
        mDocument->save();
    } catch (const ChangedOnDisk& e) {
        if (whenChanged == ChangedFile::Ask) {
            QMessageBox box(QMessageBox::Question, tr("Compression Workbench"),
                            tr("%1 was changed by another program since it was opened here (for example, "
                               "cwb project run stored results).").arg(mDocument->displayName()),
                            QMessageBox::NoButton, this);
            box.setInformativeText(tr("Merge its changes with yours and save? Parts that both changed are not merged: "
                                      "you will be told which, and can save under another name instead. A merge clears "
                                      "the undo history."));
            QPushButton* merge = box.addButton(tr("&Merge and Save"), QMessageBox::AcceptRole);
            QPushButton* saveAsButton = box.addButton(tr("Save &As…"), QMessageBox::ActionRole);
            box.addButton(QMessageBox::Cancel);
            box.setDefaultButton(merge);
            box.exec();
            if (box.clickedButton() == saveAsButton) return saveAs();
            if (box.clickedButton() != merge) return false;
        } else if (whenChanged == ChangedFile::Refuse) {
            showError(tr("The project was not saved"), QString::fromUtf8(e.what()), tr("Save it under another name with Save As."));
            return false;
        }
        QStringList problems;
        try {
            if (!mDocument->mergeChangesOnDisk(&problems)) {
                if (whenChanged == ChangedFile::Ask)
                    showError(tr("The changes could not be merged"), tr("Both this window and the file changed:\n• %1")
                                                                         .arg(problems.join(QStringLiteral("\n• "))),
                              tr("Nothing was saved. Save your version under another name with Save As."));
                statusBar()->showMessage(tr("Not saved: %1").arg(problems.join(QStringLiteral("; "))));
                return false;
            }
            mDocument->save();
        } catch (const std::exception& again) {
            showError(tr("The project was not saved"), QString::fromUtf8(again.what()), tr("Save it under another name with Save As."));
            return false;
        }
        statusBar()->showMessage(tr("Merged the file's changes and saved %1 (the undo history was cleared)").arg(mDocument->filePath()), 8000);
        return true;
    } catch (const std::exception& e) {
        showError(tr("The project was not saved"), QString::fromUtf8(e.what()),
                  tr("The file on disk is unchanged. Free disk space or choose another place with Save As."));
        return false;
    }
    statusBar()->showMessage(tr("Saved %1").arg(mDocument->filePath()), 5000);
    return true;
}

bool MainWindow::saveAs(const QString& chosen) {
    if (!mDocument) return false;
    mPipeline->commitPendingEdits();
    QString path = chosen;
    if (path.isEmpty()) {
        path = QFileDialog::getSaveFileName(this, tr("Save Project As"), mDocument->isUntitled() ? QString() : mDocument->filePath(),
                                            tr("Compression Workbench projects (*.cwbproj)"));
        if (path.isEmpty()) return false;
    }
    if (!path.endsWith(QLatin1String(".cwbproj"))) path += QLatin1String(".cwbproj");
    try {
        mDocument->saveAs(path);
    } catch (const std::exception& e) {
        showError(tr("The project was not saved"), QString::fromUtf8(e.what()), tr("Choose another folder or file name."));
        return false;
    }
    mRecent->add(path);
    statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
    return true;
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls() && event->mimeData()->urls().size() == 1 && event->mimeData()->urls().front().isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const QString path = event->mimeData()->urls().front().toLocalFile();
    event->acceptProposedAction();
    // Opening may show dialogs; do it after the drop finishes.
    QTimer::singleShot(0, this, [this, path] { openPath(path); });
}

} // namespace cwb
