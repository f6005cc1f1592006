#pragma once
// The open project as the GUI sees it: a cwb::Project, the loaded base model and the undo stack. Only the
// commands in app/commands call the mutators marked "for commands"; widgets read and listen to the signals.
// Measured results and importance maps are not undo state (STYLE.md §4): they are set directly and only
// make the document dirty.
#include <QDateTime>
#include <QFileSystemWatcher>
#include <QLockFile>
#include <QTimer>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QUndoStack>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/project/project.h"

namespace cwb {

class Feedback;
class Model;

class ProjectDocument : public QObject {
    Q_OBJECT
public:
    // Both throw cwb::Error with the file and what is wrong.
    // `recoverAutosave`: continue from the autosaved state beside the file (it then counts as unsaved).
    static std::unique_ptr<ProjectDocument> openProject(const QString& path, bool recoverAutosave = false);
    // A new, untitled project around a model file or folder (kept in a temporary folder until Save As).
    static std::unique_ptr<ProjectDocument> openModel(const QString& modelPath);

    // The same in two halves, so the slow half (reading the model) can run on a worker thread: load() touches
    // no QObject and throws like the above; fromLoaded() makes the document on the GUI thread.
    struct Loaded {
        std::unique_ptr<Project> project;
        std::shared_ptr<const Model> model;
        bool untitled = false;
        bool recovered = false;
        std::unique_ptr<Project> recoveredBase;   // recovered: the file as the autosaving editor read it (or null)
        QString temporaryFolder;
        // The project's model found at another path (loadProject's `modelPath`): the reference the document takes,
        // as an unsaved change, once it is made.
        std::optional<ModelReference> relocatedModel;
    };
    // `feedback` (may be null) gets the progress of the slow part, hashing the model's bytes for the project's
    // reference, and stops the load at its next check when cancelled (throws Cancelled).
    // `modelPath`, when given, is where the project's model is now (it moved): the model is read and hashed from
    // there, and the document points the project at it (a model with other bytes than the recorded ones leaves the
    // stored results out of date, as they are).
    static Loaded loadProject(const QString& path, bool recoverAutosave = false, Feedback* feedback = nullptr,
                              const QString& modelPath = {});
    static Loaded loadModel(const QString& modelPath, Feedback* feedback = nullptr);
    static std::unique_ptr<ProjectDocument> fromLoaded(Loaded loaded);
    ~ProjectDocument() override;

    // Untitled projects live in a folder of their own under untitledRoot() that their document locks; their autosave
    // goes there too. A folder whose lock is gone (the app ended without closing it) and that holds an autosave can be
    // recovered.
    static QStringList abandonedUntitledFolders();
    // Where untitled projects' folders go: the app's data folder (~/.local/share/<org>/<app>/untitled), which a
    // reboot keeps, unlike /tmp where they were (GUI probe); the temporary folder only where there is none.
    static QString untitledRoot();
    // The autosaved state of such a folder, untitled, counting as unsaved; the document adopts the folder.
    static Loaded loadAbandonedUntitled(const QString& folder, Feedback* feedback = nullptr);
    static void discardAbandonedUntitled(const QString& folder);

    const Project& project() const { return *mProject; }
    std::shared_ptr<const Model> model() const { return mModel; }
    QUndoStack* undoStack() { return &mUndo; }

    QString filePath() const;            // the project file; a temporary path while untitled
    QString displayName() const;         // file name, or "Untitled (<model>)"
    bool isUntitled() const { return mUntitled; }
    bool isDirty() const { return !mUndo.isClean() || mUnsavedData; }

    // The variant the editors show; "" when the project has none.
    QString currentVariant() const { return mCurrentVariant; }
    void setCurrentVariant(const QString& name);
    // The recipe steps of a variant (empty array for an unknown name).
    nlohmann::json steps(const QString& variant) const;

    // Throws cwb::Error; a failed save leaves the document as it was. cwb::ChangedOnDisk when another program saved the
    // file since this document read or saved it: mergeChangesOnDisk() then save() again, or saveAs().
    void save();
    // Merges what another program saved into the file (a `cwb project run`'s results, a variant added) with this
    // document's changes (Project::merge, against the file as this document last read or saved it). False, with the
    // reasons in `problems` and the document unchanged, for a conflict, a file that now names another model or
    // tokenizer (the loaded model would no longer be the project's), or a document recovered from an autosave that
    // has no record of the file as it was read (an older build's). Merged, the document has unsaved changes and no undo history: its steps
    // were recorded against a project the merge changed (undoing one could revert the other program's change).
    bool mergeChangesOnDisk(QStringList* problems);
    // Marks the document as having unsaved changes that are not on the undo stack.
    void markChanged() { markUnsavedData(); }
    // Adds an "export" entry (`detail`: what was written, from what) to the project's history; unsaved until a save.
    void recordExport(const nlohmann::json& detail);
    void saveAs(const QString& path);
    void autosave() const;

    // ---- for commands (app/commands) only ----
    void setSteps(const QString& variant, const nlohmann::json& steps);
    // `results` and their `basis` (Project::resultBasis): what undo of a removal gives back.
    void addVariant(const Variant& variant, const std::vector<ResultRow>& results = {}, const nlohmann::json& basis = nullptr);
    void removeVariant(const QString& name);
    void renameVariant(const QString& from, const QString& to);   // throws cwb::Error
    void setSettings(const ProjectSettings& settings);

    // The base model and its reference in the project: a tokenizer change swaps both (app/commands/tokenizer_command.h).
    struct ModelState {
        ModelReference reference;
        std::shared_ptr<const Model> model;
    };
    ModelState modelState() const { return {mProject->model(), mModel}; }
    // The base model with the tokenizer at `path` (a tokenizer.json, its folder or a llama2.c .bin) in place of its
    // own, recorded with its hash as `cwb project create --tokenizer` does. A copy of the loaded model that shares its
    // tensors, so keeping both on the undo stack costs no second copy of the weights. Throws cwb::Error naming the file
    // when the model cannot use it; changes nothing.
    ModelState withTokenizer(const QString& path) const;
    // For commands: makes `state` the document's model and the project's reference, journals the change and emits
    // modelChanged. Jobs still running keep the model they started with. Results stored before stay (they were
    // measured with the earlier tokenizer).
    void setModelState(const ModelState& state);

    // Results are measured from a variant's whole recipe (base → … → it), the model, the tokenizer and the evaluation
    // and calibration settings (Project::measurementBasis): why its stored results are not what measuring it now would
    // give, one phrase per change; empty when they are current or there are none. Results a build before schema 3
    // stored carry no basis: they are taken as measured from the project as opened (for this session only; the guess
    // is never written to the file).
    QStringList resultsOutdatedBy(const QString& variant) const;
    bool resultsCurrent(const QString& variant) const { return resultsOutdatedBy(variant).isEmpty(); }
    // What the stored results of `variant` were measured from: the recorded basis, else the one assumed at opening
    // (null when it has no results).
    nlohmann::json resultBasis(const QString& variant) const;
    // The calibration and evaluation texts whose content on disk is no longer what the project recorded (one phrase
    // each, naming the file), as `cwb project show` says it: results measured before may be of the earlier content,
    // and a run measures the text as it is. Rechecked when the settings change and when a watched text changes.
    QStringList textsChangedOnDisk() const { return mTextsChanged; }

    // ---- computed data (not undo state) ----
    // `basis`: what they were measured from (a run passes the project's basis as it started); none: the project's now.
    void setResults(const QString& variant, const std::vector<ResultRow>& rows,
                    const std::optional<nlohmann::json>& basis = std::nullopt);
    void setImportance(const ImportanceMap& map);

signals:
    void stepsChanged(const QString& variant);
    void variantsChanged();
    void currentVariantChanged(const QString& name);
    void settingsChanged();
    void resultsChanged();
    void importanceChanged();
    void modelChanged();   // model() is another object (e.g. read again with another tokenizer)
    void dirtyChanged(bool dirty);
    void filePathChanged(const QString& path);
    void textsOnDiskChanged();   // textsChangedOnDisk() says something else

private:
    ProjectDocument(Project project, std::shared_ptr<const Model> model, bool untitled);
    void markUnsavedData();
    void afterSave();
    // One history entry ("gui-edits") with what changed since the file was last read or saved: variants added, removed
    // or with another recipe, results stored, settings; nothing when nothing changed. The history showed only what
    // commands did (GUI probe). Edits undone before the save are not in it; the file's state is.
    void recordEdits(Project& project) const;

    std::unique_ptr<Project> mProject;
    std::shared_ptr<const Model> mModel;
    QUndoStack mUndo;
    bool mUntitled = false;
    bool mUnsavedData = false;
    QString mCurrentVariant;
    void assumeBasisIfUnrecorded(const std::string& variant);
    void refreshTextsOnDisk();
    QFileSystemWatcher mTextWatcher;   // the texts and their folders (an editor may replace a file, or a file come back)
    QTimer mTextCheck;                 // one check after a burst of notices
    struct TextStamp {
        qint64 size = -1;
        QDateTime modified;
        std::string hash;
    };
    std::map<std::string, TextStamp> mTextStamps;   // hashed again only when size or time changed
    QStringList mTextsChanged;
    std::unique_ptr<Project> mLastSaved;   // the file as this document last read or saved it (null: not known)
    mutable bool mBaseAutosaved = false;   // mLastSaved is written beside the autosave (Project::autosaveBase)
    std::map<std::string, nlohmann::json> mAssumedBasis;   // results without a recorded basis: the project's as opened
    QString mTemporaryFolder;   // holds the untitled project file
    std::unique_ptr<QLockFile> mFolderLock;   // says the temporary folder is in use
};

} // namespace cwb
