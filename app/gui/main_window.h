#pragma once
// The workbench window: the model tree (dock) and the Importance, Pipeline, Run and Compare tabs around one
// open ProjectDocument. Opens models and projects by menu, recent list, drag and drop or command line;
// saves through the core Project (Save, Save As, autosave every minute); title shows the dirty marker.
#include <QMainWindow>

#include <memory>

class QAction;
class QStackedWidget;
class QTabWidget;
class QTimer;

namespace cwb {

class BatchReplay;
class CompareView;
class ImportanceView;
class ModelTreeView;
class PipelineEditor;
class ProjectDocument;
class RecentFilesMenu;
class RunView;
class StatusPanel;
class WelcomePage;

enum class ComputeDevice;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum Tab { ImportanceTab, PipelineTab, RunTab, CompareTab };

    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // A .cwbproj opens as a project; anything else as a model (file or folder) in a new untitled project.
    // Errors are shown as message boxes; returns whether it opened. `interactive` false: no questions asked
    // (autosave recovery, unsaved changes), for scripts and tests.
    // A project whose model is not where it points asks to locate it (interactive) and, given one, opens with it.
    // `modelPath`: where the project's model is now (the project points there once saved); "" for its own path.
    bool openPath(const QString& path, bool interactive = true, const QString& modelPath = {});
    // A recent file: one no longer there is offered for removal from the list instead.
    bool openRecent(const QString& path);
    // File ▸ Close: asks about running jobs and unsaved changes, then shows the welcome page.
    bool closeDocument();
    // What to check after `path` failed to open: a project file that cannot be read is not sent to its model (GUI probe).
    static QString openFailureAdvice(const QString& path);
    // Run ▸ Compute On: where later runs, latency measurements and generation compute; false (with a status
    // message) for CUDA where none is available.
    bool setComputeDevice(ComputeDevice device);
    // Escape: stops the job of the tab in view (or an export); returns what it stopped, "" for nothing.
    QString cancelVisibleJob();
    // At start: untitled projects an earlier run of the app left unsaved (it ended without closing them) are offered
    // for recovery, one question each (Recover / Discard / Not now).
    void offerRecovery();
    // Continues the untitled project autosaved in `folder` (see ProjectDocument::abandonedUntitledFolders).
    bool recoverUntitled(const QString& folder, bool interactive = true);
    // When another program saved the file since it was read (a `cwb project run`, say), Ask offers to merge its
    // changes with this window's and save; Merge does so without asking (tests); Refuse shows the error.
    enum class ChangedFile { Ask, Merge, Refuse };
    bool save(ChangedFile whenChanged = ChangedFile::Ask);
    bool saveAs(const QString& path = {});
    bool editSettings();
    // Project ▸ Use Tokenizer File: gives the model that tokenizer and records it in the project (an undo step). With no
    // path it asks for a file (and, where results are stored, whether to go on); with one it asks nothing (tests).
    bool useTokenizerFile(const QString& path = {});
    // Edit ▸ Undo / Redo. A tokenizer change is not stepped over while a run, importance computation or measurement
    // reads the model (its results would be stored under the other tokenizer): refused with a message, returns false.
    bool undo();
    bool redo();
    // Replays the saved project as `cwb --batch` does, into `outputDir` (default: PROJECT-report beside it).
    bool replayAsBatch(const QString& outputDir = {});
    void showTab(Tab tab);
    // Builds the variant and exports it on a worker thread (File ▸ Export Variant, Ctrl+E); `interactive` false
    // shows no message boxes. exportFinished tells the outcome with the exporter's report or the error.
    bool exportVariant(const struct ExportRequest& request, bool interactive = true);

    ProjectDocument* document() const { return mDocument.get(); }
    ModelTreeView* modelTree() const { return mTree; }
    ImportanceView* importanceView() const { return mImportance; }
    PipelineEditor* pipelineEditor() const { return mPipeline; }
    WelcomePage* welcomePage() const { return mWelcome; }
    RunView* runView() const { return mRun; }
    CompareView* compareView() const { return mCompare; }
    StatusPanel* statusPanel() const { return mStatus; }
    bool isLoading() const { return mLoading; }
    // Stops a model or project being loaded (Run ▸ Cancel, Escape, does only this while a load runs): openPath then
    // fails with "Loading was cancelled." (in lastOpenError and the status bar, no dialog) and the open document stays.
    void cancelLoading();
    // Why the last openPath failed, starting with the absolute path of the file; empty after a success.
    QString lastOpenError() const { return mLastOpenError; }
    // The window's size, place and dock layout as the user left them at the last close, else a first size that fits
    // `available` (the screen less its panels). The app calls it; windows made without it (tests) keep the defaults
    // and save nothing.
    void restoreLayout(const QRect& available);
    static QSize firstSize(const QSize& available);
    // The Model dock's width on first show: 30% of the window (its names, shapes and types at 1600 px), at least the
    // tree's minimum (it was 114 px, names cut to "post_att", GUI probe).
    int modelDockWidth() const;

signals:
    void exportFinished(bool succeeded, const QString& message);
    void loadingStarted(const QString& path);   // the model is being read on a worker thread
    void loadingProgress(double fraction);      // of the load's slow part (hashing the model's bytes)

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;
    // The window's own shortcuts (Ctrl+E, Ctrl+D, ...) win over a focused text field's Emacs-style keys, which took them
    // (GUI probe: Ctrl+E and Ctrl+D did nothing from any spin box or line edit); editing keys (Undo, Copy, ...) stay
    // the field's.
    bool eventFilter(QObject* watched, QEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void createActions();
    void setDocument(std::unique_ptr<ProjectDocument> document);
    bool maybeSave();
    // Asks `question` when the Layers box holds edits that cannot be applied (the selected step's or kept with other
    // steps); true when there are none or `goOn` was chosen.
    bool confirmUnappliedEdits(const QString& question, const QString& goOn);
    // Closing the window or opening another project stops the jobs of this one: asks first (true: go on).
    bool maybeStopJobs();
    QStringList runningJobs() const;   // "a run", "an export"...: the jobs in progress
    bool confirmStoppingRun();   // true at once for runs under a minute
    void updateTitle();
    void showError(const QString& what, const QString& detail, const QString& todo);
    bool jobsReadingModel() const;
    bool refuseTokenizerStep(const class QUndoCommand* next);
    bool stepHistory(bool back);   // undo or redo; a step that throws clears the history, with a message
    void openDialog(bool project);
    // openPath once stopping jobs and saving were asked about (or, not interactive, not asked).
    bool openPathAsked(const QString& path, bool interactive, const QString& modelPath = {});
    std::unique_ptr<ProjectDocument> loadInBackground(const QString& path, bool isProject, bool recover, QString* error,
                                                      bool* cancelled = nullptr, const QString& modelPath = {});
    // Where the project's model is now, asked of the user when the path it records holds nothing ("" to give up).
    // `recovered`: the autosave is what opens, and its model path is the one that counts.
    QString locateMissingModel(const QString& projectPath, bool recovered);

    std::unique_ptr<ProjectDocument> mDocument;
    class QDockWidget* mModelDock = nullptr;
    bool mRemembersLayout = false;   // restoreLayout was called: the layout is saved on close
    bool mLayoutRestored = false;    // a saved dock layout was applied: the first show keeps it
    bool mShown = false;
    ModelTreeView* mTree;
    ImportanceView* mImportance;
    PipelineEditor* mPipeline;
    RunView* mRun;
    CompareView* mCompare;
    QTabWidget* mTabs;
    StatusPanel* mStatus;
    RecentFilesMenu* mRecent;
    QAction* mUndo = nullptr;
    QAction* mRedo = nullptr;
    QTimer* mAutosave;
    BatchReplay* mBatch;
    QStackedWidget* mCentral;   // the welcome page with nothing open, else the tabs
    WelcomePage* mWelcome;
    QList<QAction*> mDocumentActions;
    std::unique_ptr<class BackgroundJob> mExportJob;
    bool mLoading = false;
    class BackgroundJob* mLoadJob = nullptr;   // the load in progress, while mLoading
    QString mLastOpenError;
};

} // namespace cwb
