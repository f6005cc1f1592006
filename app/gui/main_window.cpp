#include "app/gui/main_window.h"

#include <algorithm>

#include <QAbstractItemView>
#include <QAbstractSpinBox>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeyEvent>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPointer>
#include <QPlainTextEdit>
#include <QSettings>
#include <QStatusBar>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTextDocument>
#include <QTextEdit>
#include <QTimer>
#include <QUndoStack>

#include "app/commands/command_ids.h"
#include "app/commands/settings_commands.h"
#include "app/commands/tokenizer_command.h"
#include "app/gui/background_job.h"
#include "app/gui/batch_replay.h"
#include "app/gui/budget_dialog.h"
#include "app/gui/export_dialog.h"
#include "app/gui/generation_panel.h"
#include "app/gui/compare_view.h"
#include "app/gui/compute_device.h"
#include "app/gui/importance_view.h"
#include "app/gui/layer_pick_bar.h"
#include "app/gui/model_tree_view.h"
#include "app/gui/pipeline_editor.h"
#include "app/gui/project_document.h"
#include "app/gui/recent_files.h"
#include "app/gui/welcome_page.h"
#include "app/gui/run_view.h"
#include "app/gui/settings_dialog.h"
#include "app/gui/status_panel.h"
#include "core/model/model.h"
#include "core/project/project.h"
#include "core/util/error.h"

namespace cwb {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), mTree(new ModelTreeView(this)), mImportance(new ImportanceView(this)),
      mPipeline(new PipelineEditor(this)), mRun(new RunView(this)), mCompare(new CompareView(this)),
      mTabs(new QTabWidget(this)), mStatus(new StatusPanel(statusBar())), mRecent(new RecentFilesMenu(this)),
      mAutosave(new QTimer(this)), mBatch(new BatchReplay(this)), mCentral(new QStackedWidget(this)), mWelcome(new WelcomePage(this)) {
    setAcceptDrops(true);
    qApp->installEventFilter(this);   // see eventFilter: the window's shortcuts over text fields' own keys
    // No mnemonics on the tabs: Alt+P and Alt+R also open the Project and Run menus (View ▸ Alt+1…4 switch tabs).
    mTabs->addTab(mImportance, tr("Importance"));
    mTabs->addTab(mPipeline, tr("Pipeline"));
    mTabs->addTab(mRun, tr("Run"));
    mTabs->addTab(mCompare, tr("Compare"));
    mCentral->addWidget(mWelcome);
    mCentral->addWidget(mTabs);
    setCentralWidget(mCentral);
    connect(mWelcome, &WelcomePage::openModelRequested, this, [this] { openDialog(false); });
    connect(mWelcome, &WelcomePage::openProjectRequested, this, [this] { openDialog(true); });
    connect(mWelcome, &WelcomePage::recentChosen, this, &MainWindow::openRecent);
    connect(mRecent, &RecentFilesMenu::changed, this, [this] { mWelcome->setRecentFiles(mRecent->files()); });
    auto* dock = mModelDock = new QDockWidget(tr("Model"), this);
    dock->setObjectName(QStringLiteral("modelDock"));
    dock->setWidget(mTree);
    // A narrower window took the dock down to 70 px ("bloc", "Othe"), and it stayed so when the window grew (GUI probe).
    mTree->setMinimumWidth(mTree->fontMetrics().horizontalAdvance(QLatin1Char('x')) * 24);
    addDockWidget(Qt::LeftDockWidgetArea, dock);
    createActions();
    menuBar()->findChild<QMenu*>(QStringLiteral("viewMenu"))->addAction(dock->toggleViewAction());

    connect(mImportance, &ImportanceView::layerClicked, this, [this](const QString& layer) { mTree->selectLayer(layer); });
    connect(mImportance, &ImportanceView::jobStarted, this, [this](const QString& title) { mStatus->setJob("importance", title); });
    connect(mRun, &RunView::jobStarted, this, [this](const QString& title) { mStatus->setJob("run", title); });
    connect(mImportance, &ImportanceView::jobFinished, this, [this] { mStatus->setJob("importance", {}); });
    connect(mImportance->pickBar(), &LayerPickBar::stepEdited, this, [this](const QString& message) { statusBar()->showMessage(message, 8000); });
    // Latency and generation run on workers too: the status bar said "idle" while they ran (GUI probe).
    connect(mCompare, &CompareView::latencyStarted, this, [this](const QString& title) { mStatus->setJob("latency", title); });
    connect(mCompare, &CompareView::latencyMeasured, this, [this] { mStatus->setJob("latency", {}); });
    connect(mCompare->generationPanel(), &GenerationPanel::generationStarted, this,
            [this](const QString& title) { mStatus->setJob("generation", title); });
    connect(mCompare->generationPanel(), &GenerationPanel::generationFinished, this, [this] { mStatus->setJob("generation", {}); });
    connect(mRun, &RunView::finished, this, [this](bool ok) {
        mStatus->setJob("run", {});
        statusBar()->showMessage(ok ? tr("Run finished") : tr("Run stopped"), 5000);
    });
    mRun->setBeforeRun([this] { return confirmUnappliedEdits(tr("Run without them?"), tr("Run Without Them")); });
    connect(mBatch, &BatchReplay::line, mRun, &RunView::appendLog);
    connect(mRun, &RunView::batchCancelRequested, mBatch, &BatchReplay::cancel);
    connect(mBatch, &BatchReplay::finished, this, [this](int code) {
        mStatus->setJob("batch", {});
        mRun->setBatchRunning(false, tr("Batch replay: %1").arg(BatchReplay::describeExit(code)));
        mRun->appendLog(tr("batch replay: %1").arg(BatchReplay::describeExit(code)));
        statusBar()->showMessage(tr("Batch replay: %1").arg(BatchReplay::describeExit(code)), 10000);
    });
    connect(mRecent, &RecentFilesMenu::fileChosen, this, &MainWindow::openRecent);
    connect(mAutosave, &QTimer::timeout, this, [this] {
        if (!mDocument) return;
        try {
            mDocument->autosave();
        } catch (const std::exception& e) {
            statusBar()->showMessage(tr("Autosave failed: %1").arg(QString::fromUtf8(e.what())), 10000);
        }
    });
    mAutosave->start(60 * 1000);
    setDocument(nullptr);
    resize(1400, 850);
}

MainWindow::~MainWindow() {
    // Views hold jobs that read the document's model: stop them before the document goes.
    mImportance->setDocument(nullptr);
    mRun->setDocument(nullptr);
    mCompare->setDocument(nullptr);
}

void MainWindow::createActions() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("Open &Model…"), QKeySequence::Open, this, [this] { openDialog(false); });
    file->addAction(tr("Open &Project…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this, [this] { openDialog(true); });
    file->addMenu(mRecent);
    file->addSeparator();
    mDocumentActions << file->addAction(tr("&Save"), QKeySequence::Save, this, [this] { save(); });
    // QKeySequence::SaveAs is empty on some platforms (the GUI probe's X11 had none).
    QAction* saveAsAction = file->addAction(tr("Save &As…"), this, [this] { saveAs(); });
    saveAsAction->setShortcuts(QKeySequence::keyBindings(QKeySequence::SaveAs).isEmpty()
                                   ? QList<QKeySequence>{QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S)}
                                   : QKeySequence::keyBindings(QKeySequence::SaveAs));
    mDocumentActions << saveAsAction;
    // Back to the welcome page (there was no way to close a project but opening another or quitting, GUI probe).
    mDocumentActions << file->addAction(tr("&Close"), QKeySequence(Qt::CTRL | Qt::Key_W), this, [this] { closeDocument(); });
    file->addSeparator();
    mDocumentActions << file->addAction(tr("&Export Variant…"), QKeySequence(Qt::CTRL | Qt::Key_E), this, [this] {
        if (!mDocument) return;
        if (mExportJob && mExportJob->isRunning()) {   // said before the dialog is filled in, not after (GUI probe)
            QMessageBox::information(this, tr("An export is in progress"), tr("Wait for it to finish, or cancel it (Esc), first."));
            return;
        }
        mPipeline->commitPendingEdits();
        ExportDialog dialog(mDocument->project(), mDocument->currentVariant(), mDocument->model(), this);
        if (dialog.exec() == QDialog::Accepted) exportVariant(dialog.request());
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    edit->setObjectName(QStringLiteral("editMenu"));

    QMenu* project = menuBar()->addMenu(tr("&Project"));
    mDocumentActions << project->addAction(tr("&Settings…"), QKeySequence(Qt::CTRL | Qt::Key_Comma), this, [this] { editSettings(); });
    mDocumentActions << project->addAction(tr("Use &Tokenizer File…"), this, [this] { useTokenizerFile(); });
    mDocumentActions << project->addAction(tr("&New Variant"), QKeySequence(Qt::CTRL | Qt::Key_N), this, [this] {
        showTab(PipelineTab);
        mPipeline->newVariant();
    });
    mDocumentActions << project->addAction(tr("&Duplicate Variant"), QKeySequence(Qt::CTRL | Qt::Key_D), this, [this] {
        showTab(PipelineTab);
        mPipeline->duplicateVariant();
    });
    mDocumentActions << project->addAction(tr("&Rename Variant…"), QKeySequence(Qt::Key_F2), this, [this] {
        showTab(PipelineTab);
        mPipeline->renameVariant();
    });
    project->addSeparator();
    mDocumentActions << project->addAction(tr("&Budget Solver…"), QKeySequence(Qt::Key_F7), this, [this] {
        if (!mDocument) return;
        BudgetDialog dialog(mDocument.get(), this);
        connect(&dialog, &BudgetDialog::solveStarted, this, [this](const QString& title) { mStatus->setJob("budget", title); });
        connect(&dialog, &BudgetDialog::solveFinished, this, [this] { mStatus->setJob("budget", {}); });
        const int answer = dialog.exec();
        mStatus->setJob("budget", {});   // closed while measuring: the dialog's job stopped with it
        if (answer == QDialog::Accepted) showTab(PipelineTab);
    });
    mDocumentActions << project->addAction(tr("Compute &Importance"), QKeySequence(Qt::Key_F6), this, [this] {
        showTab(ImportanceTab);
        mImportance->compute();
    });

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    mDocumentActions << run->addAction(tr("Run &Variant"), QKeySequence(Qt::Key_F5), this, [this] {
        mPipeline->commitPendingEdits();   // a target typed without Enter is part of what runs
        showTab(RunTab);
        mRun->runCurrent();
    });
    mDocumentActions << run->addAction(tr("Run &All"), QKeySequence(Qt::SHIFT | Qt::Key_F5), this, [this] {
        mPipeline->commitPendingEdits();
        showTab(RunTab);
        mRun->runAll();
    });
    mDocumentActions << run->addAction(tr("Replay as &Batch"), QKeySequence(Qt::CTRL | Qt::Key_B), this, [this] { replayAsBatch(); });
    QMenu* computeOn = run->addMenu(tr("Compute &On"));
    auto* devices = new QActionGroup(computeOn);
    QAction* onCpu = computeOn->addAction(tr("CPU (float32)"));
    QAction* onCuda = computeOn->addAction(cudaComputeAvailable() ? tr("CUDA GPU (float16)") : tr("CUDA GPU (not available)"));
    for (QAction* a : {onCpu, onCuda}) {
        a->setCheckable(true);
        devices->addAction(a);
    }
    onCuda->setEnabled(cudaComputeAvailable());
    (guiComputeDevice() == ComputeDevice::Cuda ? onCuda : onCpu)->setChecked(true);
    connect(onCpu, &QAction::triggered, this, [this] { setComputeDevice(ComputeDevice::Cpu); });
    connect(onCuda, &QAction::triggered, this, [this] { setComputeDevice(ComputeDevice::Cuda); });
    // Escape stops the work of the tab in view (one keystroke used to stop every job at once, hours of a run with it);
    // Shift+Escape stops them all.
    QAction* cancel = run->addAction(tr("&Cancel"), QKeySequence(Qt::Key_Escape), this, [this] { cancelVisibleJob(); });
    QAction* cancelAll = run->addAction(tr("Cancel All &Jobs"), QKeySequence(Qt::SHIFT | Qt::Key_Escape), this, [this] {
        if (mLoading) cancelLoading();
        if (mRun->isRunning() && !confirmStoppingRun()) return;
        mRun->cancel();
        mImportance->cancel();
        mBatch->cancel();
        mCompare->cancelMeasurement();
        mCompare->generationPanel()->cancel();
        if (mExportJob) mExportJob->cancel();
    });
    // The menu shows whether there is anything to cancel (both read as available with nothing running, GUI probe); the
    // shortcuts stay on while it is closed, since jobs start and end without the menu knowing.
    connect(run, &QMenu::aboutToShow, this, [this, cancel, cancelAll] {
        const bool busy = mLoading || !runningJobs().isEmpty();
        cancel->setEnabled(busy);
        cancelAll->setEnabled(busy);
    });
    connect(run, &QMenu::aboutToHide, this, [cancel, cancelAll] {
        cancel->setEnabled(true);
        cancelAll->setEnabled(true);
    });

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->setObjectName(QStringLiteral("viewMenu"));
    const char* names[] = {"&Importance", "&Pipeline", "&Run", "&Compare"};
    for (int i = 0; i < 4; ++i)
        view->addAction(tr(names[i]), QKeySequence(Qt::ALT | (Qt::Key_1 + i)), this, [this, i] { showTab(Tab(i)); });
    view->addSeparator();
}

void MainWindow::showTab(Tab tab) { mTabs->setCurrentIndex(int(tab)); }

void MainWindow::showError(const QString& what, const QString& detail, const QString& todo) {
    QMessageBox box(QMessageBox::Critical, tr("Compression Workbench"), what, QMessageBox::Ok, this);
    box.setInformativeText(detail + "\n\n" + todo);
    box.exec();
}

void MainWindow::setDocument(std::unique_ptr<ProjectDocument> document) {
    QMenu* edit = menuBar()->findChild<QMenu*>(QStringLiteral("editMenu"));
    delete mUndo;
    delete mRedo;
    mUndo = mRedo = nullptr;
    // Views first (they stop jobs reading the old model), then the old document goes.
    mImportance->setDocument(nullptr);
    mRun->setDocument(nullptr);
    mPipeline->setDocument(nullptr);
    mCompare->setDocument(nullptr);
    mTree->setModel(nullptr);
    // Jobs stopped with their views end without their finished signals (the job is destroyed with them): their
    // status-bar entries go here, or "▶ Measure latency" stayed on show under the next project (review).
    for (const char* key : {"importance", "run", "latency", "generation"}) mStatus->setJob(key, {});
    // The export and the batch replay work on copies, but the question before opening said they stop: an export went on
    // and wrote the old project's variant under the new one (GUI probe). They end with their own messages.
    if (mExportJob) mExportJob->cancel();
    mBatch->cancel();
    mDocument = std::move(document);
    ProjectDocument* doc = mDocument.get();
    for (QAction* a : mDocumentActions) a->setEnabled(doc);
    if (doc) {
        // Own actions rather than QUndoStack's, so that a step can be refused (see undo()).
        QUndoStack* stack = doc->undoStack();
        mUndo = new QAction(this);
        mUndo->setShortcut(QKeySequence::Undo);
        mRedo = new QAction(this);
        mRedo->setShortcut(QKeySequence::Redo);
        const auto follow = [stack](QAction* action, const QString& plain, const QString& named, bool (QUndoStack::*can)() const,
                                    QString (QUndoStack::*text)() const, void (QUndoStack::*canChanged)(bool),
                                    void (QUndoStack::*textChanged)(const QString&)) {
            const auto setText = [action, plain, named](const QString& t) { action->setText(t.isEmpty() ? plain : named.arg(t)); };
            setText((stack->*text)());
            action->setEnabled((stack->*can)());
            QObject::connect(stack, canChanged, action, &QAction::setEnabled);
            QObject::connect(stack, textChanged, action, setText);
        };
        follow(mUndo, tr("&Undo"), tr("&Undo %1"), &QUndoStack::canUndo, &QUndoStack::undoText, &QUndoStack::canUndoChanged,
               &QUndoStack::undoTextChanged);
        follow(mRedo, tr("&Redo"), tr("&Redo %1"), &QUndoStack::canRedo, &QUndoStack::redoText, &QUndoStack::canRedoChanged,
               &QUndoStack::redoTextChanged);
        connect(mUndo, &QAction::triggered, this, [this] { undo(); });
        connect(mRedo, &QAction::triggered, this, [this] { redo(); });
        edit->addAction(mUndo);
        edit->addAction(mRedo);
        mTree->setModel(doc->model().get());
        connect(doc, &ProjectDocument::modelChanged, this, [this] { mTree->setModel(mDocument->model().get()); });
        auto showSteps = [this] { mTree->setSteps(mDocument->steps(mDocument->currentVariant())); };
        connect(doc, &ProjectDocument::stepsChanged, this, showSteps);
        connect(doc, &ProjectDocument::currentVariantChanged, this, showSteps);
        connect(doc, &ProjectDocument::variantsChanged, this, showSteps);
        connect(doc, &ProjectDocument::dirtyChanged, this, &MainWindow::updateTitle);
        connect(doc, &ProjectDocument::filePathChanged, this, &MainWindow::updateTitle);
        showSteps();
        mImportance->setDocument(doc);
        mPipeline->setDocument(doc);
        mRun->setDocument(doc);
        mCompare->setDocument(doc);
    }
    mCentral->setCurrentWidget(doc ? static_cast<QWidget*>(mTabs) : mWelcome);
    if (!doc) mWelcome->setRecentFiles(mRecent->files());
    updateTitle();
}

void MainWindow::updateTitle() {
    if (!mDocument) {
        setWindowTitle(tr("Compression Workbench"));
        setWindowModified(false);
        return;
    }
    setWindowTitle(tr("%1[*] — Compression Workbench").arg(mDocument->displayName()));
    setWindowModified(mDocument->isDirty());
}

bool MainWindow::jobsReadingModel() const {
    return mRun->isRunning() || mImportance->isComputing() || mCompare->isMeasuring();
}

bool MainWindow::refuseTokenizerStep(const QUndoCommand* next) {
    if (!next || next->id() != static_cast<int>(CommandId::Tokenizer) || !jobsReadingModel()) return false;
    statusBar()->showMessage(tr("\"%1\" waits: a run, importance computation or measurement is reading the model. "
                                "Wait for it to finish, or cancel it.").arg(next->text()), 8000);
    return true;
}

bool MainWindow::undo() {
    if (!mDocument) return false;
    QUndoStack* stack = mDocument->undoStack();
    if (!stack->canUndo() || refuseTokenizerStep(stack->command(stack->index() - 1))) return false;
    return stepHistory(true);
}

bool MainWindow::stepHistory(bool back) {
    QUndoStack* stack = mDocument->undoStack();
    try {
        back ? stack->undo() : stack->redo();
        return true;
    } catch (const std::exception& e) {
        // The project no longer fits the step (changed by other means); the history past it cannot be trusted.
        stack->clear();
        mDocument->markChanged();
        showError(back ? tr("The edit could not be undone") : tr("The edit could not be redone"), QString::fromUtf8(e.what()),
                  tr("The undo history was cleared; the project is as shown."));
        return false;
    }
}

bool MainWindow::redo() {
    if (!mDocument) return false;
    QUndoStack* stack = mDocument->undoStack();
    if (!stack->canRedo() || refuseTokenizerStep(stack->command(stack->index()))) return false;
    return stepHistory(false);
}

bool MainWindow::useTokenizerFile(const QString& given) {
    if (!mDocument) return false;
    // A job started before would store results measured with the earlier tokenizer under the new one.
    if (jobsReadingModel()) {
        if (given.isEmpty())
            showError(tr("The tokenizer was not changed"), tr("A run, importance computation or measurement is in progress."),
                      tr("Wait for it to finish, or cancel it, then try again."));
        return false;
    }
    QString path = given;
    if (path.isEmpty()) {
        path = QFileDialog::getOpenFileName(this, tr("Use Tokenizer File"), QFileInfo(QString::fromStdString(mDocument->project().model().path)).path(),
                                            tr("Tokenizers (*.json *.model *.gguf *.bin);;All files (*)"));
        if (path.isEmpty()) return false;
        if (!mDocument->project().results().empty() &&
            QMessageBox::question(this, tr("Use Tokenizer File"),
                                  tr("The stored results were measured with the model's present tokenizer; they are kept, "
                                     "but perplexity, KL divergence and agreement depend on the tokens. Run the variants "
                                     "again after the change.\n\nUse %1?").arg(QFileInfo(path).fileName())) != QMessageBox::Yes)
            return false;
    }
    try {
        mDocument->undoStack()->push(new ChangeTokenizer(mDocument.get(), path));   // the constructor reads it, or throws
    } catch (const std::exception& e) {
        if (given.isEmpty())
            showError(tr("The tokenizer was not changed"), QString::fromUtf8(e.what()),
                      tr("Choose a Hugging Face tokenizer.json, a SentencePiece tokenizer.model, a GGUF file or a llama2.c tokenizer .bin made for this model."));
        return false;
    }
    statusBar()->showMessage(tr("Tokenizer: %1").arg(path), 5000);
    return true;
}

bool MainWindow::editSettings() {
    if (!mDocument) return false;
    SettingsDialog dialog(mDocument->project().settings(), mDocument->model()->spec.context, this);
    if (dialog.exec() != QDialog::Accepted) return false;
    try {
        const ProjectSettings s = dialog.settings();
        if (s == mDocument->project().settings()) return false;
        mDocument->undoStack()->push(changeSettings(mDocument.get(), s));
    } catch (const std::exception& e) {
        showError(tr("Settings not changed"), QString::fromUtf8(e.what()), tr("Choose a readable text file."));
        return false;
    }
    return true;
}

bool MainWindow::exportVariant(const ExportRequest& request, bool interactive) {
    if (!mDocument) return false;
    if (mExportJob && mExportJob->isRunning()) {
        if (interactive) QMessageBox::information(this, tr("An export is in progress"), tr("Wait for it to finish first."));
        return false;
    }
    auto outcome = std::make_shared<ExportOutcome>();
    mExportJob = makeExportJob(mDocument->project(), mDocument->model(), request, outcome);
    const QString title = tr("Export %1 as %2").arg(request.variant, request.format);
    connect(mExportJob.get(), &BackgroundJob::progressChanged, this, [this, title](double f) {
        mStatus->setJob("export", tr("%1 (%2%)").arg(title).arg(int(f * 100)));
    });
    mStatus->setJob("export", title);
    QPointer<ProjectDocument> exported = mDocument.get();
    connect(mExportJob.get(), &BackgroundJob::finished, this, [this, outcome, interactive, request, exported](bool cancelled, const QString& error) {
        mStatus->setJob("export", {});
        const bool ok = !cancelled && error.isEmpty();
        // In the project's history, as the command line's runs are (a GUI export was recorded nowhere).
        if (ok && exported) exported->recordExport(outcome->journal);
        const QStringList* summary = &outcome->lines;
        const QString message = ok ? summary->join('\n') : cancelled ? tr("Export cancelled; nothing was written.") : error;
        if (cancelled) statusBar()->showMessage(message, 8000);
        if (interactive) {
            if (ok) {
                // The first lines, and every tensor's note behind Show Details: a 7B export lists hundreds of layers, and
                // the box once ran past the screen with its OK button (GUI probe).
                constexpr int kShown = 6;
                QMessageBox box(QMessageBox::Information, tr("Exported"),
                                summary->size() <= kShown ? message
                                                          : QStringList(summary->mid(0, kShown)).join('\n') +
                                                                tr("\n… and %1 more lines (Show Details…)").arg(summary->size() - kShown),
                                QMessageBox::Ok, this);
                if (summary->size() > kShown) box.setDetailedText(message);
                box.exec();
            } else if (!cancelled) {
                // A full disk or a folder that cannot be written is not the format's fault.
                const bool io = error.contains("disk full") || error.contains("cannot create") || error.contains("cannot write") ||
                                error.contains("cannot move");
                showError(tr("The export of %1 as %2 failed.").arg(request.variant, request.format), error,
                          io ? tr("Free some space or choose another folder; nothing was left half-written.")
                             : tr("Choose another format or tensor type (the message says what the format cannot hold)."));
            }
        }
        emit exportFinished(ok, message);
    });
    mExportJob->start();
    return true;
}

bool MainWindow::replayAsBatch(const QString& outputDir) {
    if (!mDocument || mBatch->isRunning()) return false;
    mPipeline->commitPendingEdits();
    if (mRun->isRunning()) {   // the two would share the Run tab's bar, buttons and Cancel
        showError(tr("A run is in progress"), tr("The batch replay would run beside it."), tr("Wait for the run or cancel it (Esc), then replay."));
        return false;
    }
    if (mDocument->isUntitled() || mDocument->isDirty()) {
        showError(tr("Save the project first"), tr("The batch replay reads the project file, and it has unsaved changes."),
                  tr("Save (Ctrl+S), then replay again."));
        return false;
    }
    const QString out = outputDir.isEmpty() ? QFileInfo(mDocument->filePath()).absolutePath() + "/" +
                                                  QFileInfo(mDocument->filePath()).completeBaseName() + "-report"
                                            : outputDir;
    showTab(RunTab);
    mRun->appendLog(tr("batch replay of %1 into %2").arg(mDocument->filePath(), out));
    mStatus->setJob("batch", tr("Batch replay"));
    mRun->setBatchRunning(true);
    mBatch->start(mDocument->filePath(), out);
    return true;
}

namespace {

// Whether the text field `widget` (or a spin box's or editable combo's) has its own undo (redo) step to take; true
// for widgets that are no text field, which handle the keys as they do.
bool fieldCanUndo(QWidget* widget, bool undo) {
    QLineEdit* line = qobject_cast<QLineEdit*>(widget);
    if (!line && (qobject_cast<QAbstractSpinBox*>(widget) || qobject_cast<QComboBox*>(widget))) line = widget->findChild<QLineEdit*>();
    if (line) return !line->isReadOnly() && (undo ? line->isUndoAvailable() : line->isRedoAvailable());
    if (auto* plain = qobject_cast<QPlainTextEdit*>(widget))
        return !plain->isReadOnly() && (undo ? plain->document()->isUndoAvailable() : plain->document()->isRedoAvailable());
    if (auto* rich = qobject_cast<QTextEdit*>(widget))
        return !rich->isReadOnly() && (undo ? rich->document()->isUndoAvailable() : rich->document()->isRedoAvailable());
    return true;
}

} // namespace

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
    if (event->type() != QEvent::ShortcutOverride) return QMainWindow::eventFilter(watched, event);
    auto* widget = qobject_cast<QWidget*>(watched);
    auto* key = static_cast<QKeyEvent*>(event);
    // F2 edits the current cell of a table that has the focus (an override's pattern or parameters), or is ignored in
    // its editor, as in any table: the window's Rename Variant took it, and renamed the variant to what was typed for
    // the cell (GUI probe).
    if (widget && widget->window() == this && key->key() == Qt::Key_F2 && key->modifiers() == Qt::NoModifier)
        for (QWidget* w = widget; w && w != this; w = w->parentWidget())
            if (auto* view = qobject_cast<QAbstractItemView*>(w);
                view && (view->editTriggers() & QAbstractItemView::EditKeyPressed) &&
                (view->currentIndex().flags() & Qt::ItemIsEditable)) {
                event->accept();   // the view's key press, not the shortcut
                return true;
            }
    if (!widget || widget->window() != this || !(key->modifiers() & Qt::ControlModifier)) return QMainWindow::eventFilter(watched, event);
    // Undo and redo go to the field while it has typing of its own to undo, then to the project (a field took Ctrl+Z
    // and did nothing, or undid its text alone while the project kept the value, GUI probe).
    for (QKeySequence::StandardKey history : {QKeySequence::Undo, QKeySequence::Redo})
        if (key->matches(history) && !fieldCanUndo(widget, history == QKeySequence::Undo)) {
            event->ignore();
            return true;
        }
    for (QKeySequence::StandardKey editing : {QKeySequence::Undo, QKeySequence::Redo, QKeySequence::Copy, QKeySequence::Cut,
                                               QKeySequence::Paste, QKeySequence::SelectAll, QKeySequence::Delete})
        if (key->matches(editing)) return QMainWindow::eventFilter(watched, event);
    const QKeySequence pressed(key->keyCombination());
    for (QAction* action : findChildren<QAction*>())
        if (action->isEnabled() && action->shortcuts().contains(pressed)) {
            event->ignore();   // not taken by the field: the shortcut map then triggers the action
            return true;
        }
    return QMainWindow::eventFilter(watched, event);
}

void MainWindow::closeEvent(QCloseEvent* event) {
    if (mLoading) {   // the nested loading loop must finish first
        event->ignore();
        return;
    }
    if (!maybeStopJobs() || !maybeSave()) {
        event->ignore();
        return;
    }
    if (mRemembersLayout) {
        QSettings settings;
        settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
        settings.setValue(QStringLiteral("window/state"), saveState());
    }
    event->accept();
}

QSize MainWindow::firstSize(const QSize& available) {
    // 1600 x 950 where it fits; on a smaller screen (1366 x 768, 1024 x 768, or scaled up) 90% of it: the buttons at the
    // bottom and the status bar were off-screen at a fixed 1400 x 850 (GUI probe). No screen known: 1400 x 850.
    const QSize preferred(1600, 950);
    if (!available.isValid() || available.isEmpty()) return QSize(1400, 850);
    return preferred.boundedTo(QSize(available.width() * 90 / 100, available.height() * 90 / 100));
}

void MainWindow::restoreLayout(const QRect& available) {
    mRemembersLayout = true;
    QSettings settings;
    const bool placed = restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    if (!placed) resize(firstSize(available.size()));
    mLayoutRestored = placed && restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
}

int MainWindow::modelDockWidth() const {
    return std::max(mTree->minimumWidth(), width() * 30 / 100);
}

void MainWindow::showEvent(QShowEvent* event) {
    QMainWindow::showEvent(event);
    if (mShown) return;
    mShown = true;
    // Sized once the window has its size: resizeDocks before the first show did nothing, and the dock opened at 114 px.
    if (!mLayoutRestored)
        QTimer::singleShot(0, this, [this] { resizeDocks({mModelDock}, {modelDockWidth()}, Qt::Horizontal); });
}

bool MainWindow::setComputeDevice(ComputeDevice device) {
    try {
        setGuiComputeDevice(device);
    } catch (const std::exception& e) {
        statusBar()->showMessage(QString::fromStdString(errorText(e)), 8000);
        return false;
    }
    mStatus->refreshDevice();
    statusBar()->showMessage(tr("Runs, latency and generation now compute on %1 (jobs already running keep theirs)")
                                 .arg(describeComputeDevice()), 8000);
    return true;
}

QString MainWindow::cancelVisibleJob() {
    if (mLoading) {   // while a model loads, Escape stops that load only
        cancelLoading();
        return tr("loading");
    }
    switch (Tab(mTabs->currentIndex())) {
    case ImportanceTab:
        if (mImportance->isComputing()) {
            mImportance->cancel();
            return tr("importance");
        }
        break;
    case RunTab:
        if (mRun->isRunning()) {
            if (!confirmStoppingRun()) return {};
            mRun->cancel();
            return tr("run");
        }
        if (mBatch->isRunning()) {
            mBatch->cancel();
            return tr("batch replay");
        }
        break;
    case CompareTab:
        if (mCompare->isMeasuring()) {
            mCompare->cancelMeasurement();
            return tr("latency measurement");
        }
        if (mCompare->generationPanel()->isGenerating()) {
            mCompare->generationPanel()->cancel();
            return tr("generation");
        }
        break;
    case PipelineTab:
        break;
    }
    if (mExportJob && mExportJob->isRunning()) {   // shown in the status bar, whatever the tab
        mExportJob->cancel();
        return tr("export");
    }
    statusBar()->showMessage(tr("Nothing to cancel on this tab (Shift+Esc cancels every job)"), 4000);
    return {};
}

bool MainWindow::confirmStoppingRun() {
    if (mRun->elapsedSeconds() < 60) return true;
    return QMessageBox::question(this, tr("Cancel the run?"),
                                 tr("The run has been going for %1 min; variants it has not finished are lost.")
                                     .arg(int(mRun->elapsedSeconds() / 60)),
                                 QMessageBox::Yes | QMessageBox::No, QMessageBox::No) == QMessageBox::Yes;
}

QStringList MainWindow::runningJobs() const {
    QStringList running;
    if (mRun->isRunning()) running << tr("a run");
    if (mImportance->isComputing()) running << tr("an importance computation");
    if (mCompare->isMeasuring()) running << tr("a latency measurement");
    if (mCompare->generationPanel()->isGenerating()) running << tr("a text generation");
    if (mExportJob && mExportJob->isRunning()) running << tr("an export");
    if (mBatch->isRunning()) running << tr("a batch replay");
    return running;
}

bool MainWindow::maybeStopJobs() {
    const QStringList running = runningJobs();
    if (running.isEmpty()) return true;
    QString what = running.join(tr(", "));
    what[0] = what[0].toUpper();
    const auto answer = QMessageBox::question(
        this, tr("Stop the work in progress?"),
        tr("%1 is in progress on this project and will be stopped; what it has not stored yet is lost.").arg(what),
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    return answer == QMessageBox::Yes;
}

} // namespace cwb
