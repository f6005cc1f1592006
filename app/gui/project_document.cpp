#include "app/gui/project_document.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/project/file_hash.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

std::string absolutePath(const QString& path) { return QFileInfo(path).absoluteFilePath().toStdString(); }

const char* const kUntitledLock = "cwb.lock";

// The autosave of the untitled project in `folder` ("" when there is none).
QString untitledAutosave(const QString& folder) {
    const QStringList files = QDir(folder).entryList({QStringLiteral("*.cwbproj.autosave")}, QDir::Files);
    return files.isEmpty() ? QString() : folder + "/" + files.front();
}

} // namespace

ProjectDocument::ProjectDocument(Project project, std::shared_ptr<const Model> model, bool untitled)
    : mProject(std::make_unique<Project>(std::move(project))), mModel(std::move(model)), mUntitled(untitled) {
    if (!mProject->variants().empty()) mCurrentVariant = QString::fromStdString(mProject->variants().front().name);
    assumeBasisIfUnrecorded(Project::kBaseName);
    for (const auto& v : mProject->variants()) assumeBasisIfUnrecorded(v.name);
    connect(&mUndo, &QUndoStack::cleanChanged, this, [this] { emit dirtyChanged(isDirty()); });
    connect(this, &ProjectDocument::settingsChanged, this, &ProjectDocument::refreshTextsOnDisk);
    mTextCheck.setSingleShot(true);
    mTextCheck.setInterval(250);
    connect(&mTextCheck, &QTimer::timeout, this, &ProjectDocument::refreshTextsOnDisk);
    connect(&mTextWatcher, &QFileSystemWatcher::fileChanged, &mTextCheck, qOverload<>(&QTimer::start));
    connect(&mTextWatcher, &QFileSystemWatcher::directoryChanged, &mTextCheck, qOverload<>(&QTimer::start));
    refreshTextsOnDisk();
}

void ProjectDocument::refreshTextsOnDisk() {
    const ProjectSettings& s = mProject->settings();
    // As textHashesOnDisk takes them (a text not there, unreadable or never hashed: as recorded), without hashing a
    // file again whose size and time did not change.
    const auto hashNow = [this](const FileReference& ref) {
        if (ref.path.empty() || ref.hash.empty()) return ref.hash;
        const QFileInfo info(QString::fromStdString(ref.path));
        if (!info.isFile()) return ref.hash;
        TextStamp& stamp = mTextStamps[ref.path];
        if (stamp.size == info.size() && stamp.modified == info.lastModified() && !stamp.hash.empty()) return stamp.hash;
        try {
            stamp = {info.size(), info.lastModified(), hashFile(ref.path)};
        } catch (const Error&) {
            return ref.hash;
        }
        return stamp.hash;
    };
    const TextHashes now{hashNow(s.evaluation), hashNow(s.calibration)};
    QStringList changed;
    if (now.evaluation != s.evaluation.hash)
        changed << tr("the evaluation text %1 changed on disk since the project recorded it").arg(QString::fromStdString(s.evaluation.path));
    if (now.calibration != s.calibration.hash)
        changed << tr("the calibration text %1 changed on disk since the project recorded it").arg(QString::fromStdString(s.calibration.path));
    // Watched again each time: an editor that saves by writing a new file and renaming it ends the old watch.
    if (!mTextWatcher.files().isEmpty()) mTextWatcher.removePaths(mTextWatcher.files());
    QStringList paths;
    if (!mTextWatcher.directories().isEmpty()) mTextWatcher.removePaths(mTextWatcher.directories());
    for (const FileReference* ref : {&s.evaluation, &s.calibration}) {
        const QString path = QString::fromStdString(ref->path);
        if (path.isEmpty()) continue;
        const QString folder = QFileInfo(path).absolutePath();
        if (QFileInfo(path).isFile() && !paths.contains(path)) paths << path;
        if (QFileInfo(folder).isDir() && !paths.contains(folder)) paths << folder;
    }
    if (!paths.isEmpty()) mTextWatcher.addPaths(paths);
    if (changed != mTextsChanged) {
        mTextsChanged = changed;
        emit textsOnDiskChanged();
    }
}

ProjectDocument::~ProjectDocument() {
    const bool ours = mFolderLock && mFolderLock->isLocked();
    mFolderLock.reset();   // unlocked before its folder goes
    if (ours && !mTemporaryFolder.isEmpty()) QDir(mTemporaryFolder).removeRecursively();
}

ProjectDocument::Loaded ProjectDocument::loadProject(const QString& path, bool recoverAutosave, Feedback* feedback,
                                                     const QString& modelPath) {
    Loaded loaded;
    loaded.project = std::make_unique<Project>(recoverAutosave ? Project::recoverAutosave(absolutePath(path)) : Project::open(absolutePath(path)));
    if (feedback) feedback->throwIfCancelled();
    const ModelReference& recorded = loaded.project->model();
    const std::string readFrom = modelPath.isEmpty() ? recorded.path : absolutePath(modelPath);
    try {
        loaded.model = cwb::loadModel(readFrom, recorded.loadOptions());
    } catch (const Error& e) {
        throw Error(loaded.project->path(), std::string("cannot load the project's model: ") + e.what());
    }
    if (!modelPath.isEmpty() && readFrom != recorded.path) {
        ModelReference moved = recorded;
        moved.path = readFrom;
        moved.format = loaded.model->format;
        const bool folder = std::filesystem::is_directory(readFrom);
        moved.hash = folder ? hashFolder(readFrom, feedback) : hashFile(readFrom, feedback);
        moved.bytes = folder ? 0 : fileBytes(readFrom);
        moved.tokenizerHash = tokenizerHashToRecord(*loaded.model, moved.tokenizer);
        loaded.relocatedModel = moved;
    }
    loaded.recovered = recoverAutosave;
    if (recoverAutosave) {
        try {
            loaded.recoveredBase = Project::recoverAutosaveBase(loaded.project->path());
        } catch (const Error&) {
            // A damaged base only costs the merge: the recovered state itself was read.
        }
    }
    return loaded;
}

ProjectDocument::Loaded ProjectDocument::loadModel(const QString& modelPath, Feedback* feedback) {
    const std::string path = absolutePath(modelPath);
    Loaded loaded;
    loaded.model = cwb::loadModel(path);   // maps the tensors: quick; hashing every byte below is what takes long
    if (feedback) feedback->throwIfCancelled();
    ModelReference ref;
    ref.path = path;
    ref.format = loaded.model->format;
    const bool folder = std::filesystem::is_directory(path);
    ref.hash = folder ? hashFolder(path, feedback) : hashFile(path, feedback);
    ref.bytes = folder ? 0 : fileBytes(path);
    ref.tokenizerHash = tokenizerHashToRecord(*loaded.model, "");   // a llama2.c checkpoint's tokenizer file
    ProjectSettings settings;
    settings.evalCtx = std::min<int64_t>(settings.evalCtx, loaded.model->spec.context);
    settings.calibrationSeqLen = std::min<int64_t>(settings.calibrationSeqLen, loaded.model->spec.context);

    QTemporaryDir folderForUntitled(untitledRoot() + "/cwb-untitled-XXXXXX");
    if (!folderForUntitled.isValid()) throw Error(untitledRoot().toStdString(), "cannot create a folder for the untitled project");
    folderForUntitled.setAutoRemove(false);
    const QString stem = QFileInfo(modelPath).completeBaseName();
    loaded.project = std::make_unique<Project>(Project::create((folderForUntitled.path() + "/" + stem + ".cwbproj").toStdString(), ref, settings));
    loaded.project->record("create", {{"model", path}});
    loaded.untitled = true;
    loaded.temporaryFolder = folderForUntitled.path();
    return loaded;
}

std::unique_ptr<ProjectDocument> ProjectDocument::fromLoaded(Loaded loaded) {
    std::unique_ptr<ProjectDocument> doc(new ProjectDocument(std::move(*loaded.project), std::move(loaded.model), loaded.untitled));
    doc->mUnsavedData = loaded.recovered;
    if (!loaded.recovered && !loaded.untitled) doc->mLastSaved = std::make_unique<Project>(*doc->mProject);
    if (loaded.recovered && !loaded.untitled) doc->mLastSaved = std::move(loaded.recoveredBase);
    doc->mTemporaryFolder = loaded.temporaryFolder;
    if (loaded.relocatedModel) {   // after mLastSaved: the file on disk still names the old path until a save
        const std::string previous = doc->mProject->model().path;
        doc->mProject->setModel(*loaded.relocatedModel);
        doc->mProject->record("model-located", {{"path", loaded.relocatedModel->path}, {"previous", previous},
                                                {"hash", loaded.relocatedModel->hash}});
        doc->mUnsavedData = true;
    }
    if (!doc->mTemporaryFolder.isEmpty()) {
        doc->mFolderLock = std::make_unique<QLockFile>(doc->mTemporaryFolder + "/" + kUntitledLock);
        if (!doc->mFolderLock->tryLock(0)) {   // another instance took it first (it recovered the same folder)
            doc->mFolderLock.reset();
            doc->mTemporaryFolder.clear();   // not ours to remove
            throw Error(loaded.temporaryFolder.toStdString(), "is in use by another Compression Workbench");
        }
    }
    return doc;
}

QString ProjectDocument::untitledRoot() {
    const QString data = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
    if (!data.isEmpty() && QDir().mkpath(data + "/untitled")) return data + "/untitled";
    return QDir::tempPath();
}

QStringList ProjectDocument::abandonedUntitledFolders() {
    QStringList found;
    // Also the temporary folder, where builds before this one put them.
    QStringList roots{untitledRoot()};
    if (!roots.contains(QDir::tempPath())) roots << QDir::tempPath();
    for (const QString& root : roots) {
        for (const QFileInfo& folder : QDir(root).entryInfoList({QStringLiteral("cwb-untitled-*")}, QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time)) {
            const QString path = folder.absoluteFilePath();
            if (untitledAutosave(path).isEmpty()) continue;   // nothing to recover (or an older app's folder): left alone
            QLockFile lock(path + "/" + kUntitledLock);
            if (!lock.tryLock(0)) continue;   // a running app holds it (a lock of an ended process counts as free)
            found << path;
        }
    }
    return found;
}

ProjectDocument::Loaded ProjectDocument::loadAbandonedUntitled(const QString& folder, Feedback* feedback) {
    const QString autosaved = untitledAutosave(folder);
    if (autosaved.isEmpty()) throw Error(folder.toStdString(), "holds no autosaved project to recover");
    const std::string projectPath = autosaved.chopped(int(std::strlen(".autosave"))).toStdString();
    Loaded loaded;
    loaded.project = std::make_unique<Project>(Project::recoverAutosave(projectPath));
    if (feedback) feedback->throwIfCancelled();
    try {
        loaded.model = cwb::loadModel(loaded.project->model().path, loaded.project->model().loadOptions());
    } catch (const Error& e) {
        throw Error(projectPath, std::string("cannot load the project's model: ") + e.what());
    }
    loaded.untitled = true;
    loaded.recovered = true;
    loaded.temporaryFolder = folder;
    return loaded;
}

void ProjectDocument::discardAbandonedUntitled(const QString& folder) {
    if (!QFileInfo(folder).fileName().startsWith(QLatin1String("cwb-untitled-"))) return;
    QLockFile lock(folder + "/" + kUntitledLock);
    if (!lock.tryLock(0)) return;   // another instance holds it now: not ours to delete
    lock.unlock();
    QDir(folder).removeRecursively();
}

std::unique_ptr<ProjectDocument> ProjectDocument::openProject(const QString& path, bool recoverAutosave) {
    return fromLoaded(loadProject(path, recoverAutosave));
}

std::unique_ptr<ProjectDocument> ProjectDocument::openModel(const QString& modelPath) { return fromLoaded(loadModel(modelPath)); }

QString ProjectDocument::filePath() const { return QString::fromStdString(mProject->path()); }

QString ProjectDocument::displayName() const {
    if (mUntitled) return tr("Untitled (%1)").arg(QFileInfo(QString::fromStdString(mProject->model().path)).fileName());
    return QFileInfo(filePath()).fileName();
}

void ProjectDocument::setCurrentVariant(const QString& name) {
    if (name == mCurrentVariant) return;
    mCurrentVariant = name;
    emit currentVariantChanged(name);
}

nlohmann::json ProjectDocument::steps(const QString& variant) const {
    const std::string name = variant.toStdString();
    if (!mProject->hasVariant(name)) return nlohmann::json::array();
    return mProject->variant(name).recipe.value("steps", nlohmann::json::array());
}

void ProjectDocument::recordEdits(Project& project) const {
    std::map<std::string, const Variant*> was;
    if (mLastSaved)
        for (const auto& v : mLastSaved->variants()) was[v.name] = &v;
    nlohmann::json added = nlohmann::json::array(), removed = nlohmann::json::array(), edited = nlohmann::json::array(),
                   measured = nlohmann::json::array();
    for (const auto& v : project.variants()) {
        const auto it = was.find(v.name);
        if (it == was.end()) added.push_back({{"name", v.name}, {"parent", v.parent}, {"recipe", v.recipe}});
        else if (it->second->recipe != v.recipe || it->second->parent != v.parent)
            edited.push_back({{"name", v.name}, {"recipe", v.recipe}});
    }
    for (const auto& [name, v] : was)
        if (!project.hasVariant(name)) removed.push_back(name);
    std::vector<std::string> names{Project::kBaseName};
    for (const auto& v : project.variants()) names.push_back(v.name);
    for (const auto& name : names)
        if (!project.results(name).empty() && (!mLastSaved || mLastSaved->results(name) != project.results(name)))
            measured.push_back(name);
    nlohmann::json detail = nlohmann::json::object();
    if (!added.empty()) detail["added"] = added;
    if (!removed.empty()) detail["removed"] = removed;
    if (!edited.empty()) detail["edited"] = edited;
    if (!measured.empty()) detail["measured"] = measured;
    if (mLastSaved && !(mLastSaved->settings() == project.settings())) detail["settings"] = true;
    if (detail.empty()) return;
    // A save refused (the file changed on disk) and tried again after the merge: one entry.
    const auto& journal = project.journal();
    if (!journal.empty() && journal.back().action == "gui-edits" && journal.back().detail == detail) return;
    project.record("gui-edits", detail);
}

void ProjectDocument::save() {
    if (mUntitled) throw Error("an untitled project needs a file name: use Save As");
    recordEdits(*mProject);
    mProject->save();
    Project::discardAutosave(mProject->path());   // this document's autosave: its changes are saved now
    afterSave();
}

bool ProjectDocument::mergeChangesOnDisk(QStringList* problems) {
    QStringList found;
    if (mUntitled || !mLastSaved) {
        found << tr("this project was recovered from an autosave that does not record the file as it was read (an "
                    "older build's, or its record is damaged or of another save of the file)");
    } else {
        Project theirs = Project::open(mProject->path());
        Project merged = *mProject;
        std::vector<std::string> conflicts;
        if (!Project::merge(*mLastSaved, merged, theirs, &conflicts)) {
            for (const auto& c : conflicts) found << QString::fromStdString(c);
        } else if (!(merged.model() == mProject->model())) {
            found << tr("the file now names another model or tokenizer (%1); open it again to use that")
                         .arg(QString::fromStdString(merged.model().path));
        } else {
            *mProject = std::move(merged);
            *mLastSaved = std::move(theirs);
            mBaseAutosaved = false;
            mUndo.clear();   // its steps were recorded against the project before the merge
            for (const auto& v : mProject->variants())
                if (!mAssumedBasis.count(v.name)) assumeBasisIfUnrecorded(v.name);
            if (!mAssumedBasis.count(Project::kBaseName)) assumeBasisIfUnrecorded(Project::kBaseName);
            if (!mCurrentVariant.isEmpty() && !mProject->hasVariant(mCurrentVariant.toStdString()))
                setCurrentVariant(mProject->variants().empty() ? QString() : QString::fromStdString(mProject->variants().front().name));
            markUnsavedData();
            emit variantsChanged();
            emit settingsChanged();
            emit importanceChanged();
            emit resultsChanged();
            if (!mCurrentVariant.isEmpty()) emit stepsChanged(mCurrentVariant);
        }
    }
    if (problems) *problems = found;
    return found.isEmpty();
}

void ProjectDocument::saveAs(const QString& path) {
    const std::string target = absolutePath(path);
    if (!mUntitled && target == mProject->path()) return save();
    // The whole state goes, history included (a copy made table by table lost the journal).
    Project copy = *mProject;
    recordEdits(copy);
    copy.record("save-as", {{"from", mProject->path()}});
    // An autosave left at the target by a session on the file being replaced is not this document's: recovering it
    // (or merging with it) later would bring that project's edits into this one.
    Project::discardAutosave(target);
    copy.writeCopy(target);
    const std::string previous = mProject->path();
    *mProject = Project::open(target);
    const bool wasUntitled = mUntitled;
    if (!wasUntitled) Project::discardAutosave(previous);   // its changes are saved, under the new name
    mUntitled = false;
    if (wasUntitled && !mTemporaryFolder.isEmpty()) {
        mFolderLock.reset();
        QDir(mTemporaryFolder).removeRecursively();
        mTemporaryFolder.clear();
    }
    afterSave();
    emit filePathChanged(filePath());
}

void ProjectDocument::autosave() const {
    // Untitled projects too: their autosave stays in their temporary folder for a later start to recover.
    if (!isDirty()) return;
    // The base first, once per state of the file: a recovered autosave is merged against it.
    // Again when the base file went (the autosave was discarded while this document stayed open).
    if (mLastSaved && !mUntitled &&
        (!mBaseAutosaved || !QFileInfo::exists(QString::fromStdString(Project::autosaveBasePath(mProject->path()))))) {
        mProject->autosaveBase(*mLastSaved);
        mBaseAutosaved = true;
    }
    mProject->autosave();
}

void ProjectDocument::afterSave() {
    mLastSaved = std::make_unique<Project>(*mProject);
    mBaseAutosaved = false;
    mUnsavedData = false;
    const bool wasClean = mUndo.isClean();
    mUndo.setClean();
    if (wasClean) emit dirtyChanged(isDirty());
}

void ProjectDocument::recordExport(const nlohmann::json& detail) {
    mProject->record("export", detail);
    markUnsavedData();
}

void ProjectDocument::markUnsavedData() {
    const bool before = isDirty();
    mUnsavedData = true;
    if (!before) emit dirtyChanged(true);
}

void ProjectDocument::setSteps(const QString& variant, const nlohmann::json& steps) {
    nlohmann::json recipe = mProject->variant(variant.toStdString()).recipe;
    recipe["steps"] = steps;
    mProject->setRecipe(variant.toStdString(), recipe);
    // Undo and redo can reach a variant that is not in view: it is brought into view, so the change can be seen.
    if (variant != mCurrentVariant) setCurrentVariant(variant);
    emit stepsChanged(variant);
    emit resultsChanged();   // their results may be of another recipe now (resultsCurrent)
}

void ProjectDocument::addVariant(const Variant& variant, const std::vector<ResultRow>& results, const nlohmann::json& basis) {
    mProject->addVariant(variant);
    if (!results.empty()) mProject->setResults(variant.name, results, basis);   // undo/redo: as they were
    // Results without a recorded basis keep the one assumed when the file was opened (kept through the removal).
    if (results.empty() || !basis.is_null() || !mAssumedBasis.count(variant.name)) assumeBasisIfUnrecorded(variant.name);
    emit variantsChanged();
    if (!results.empty()) emit resultsChanged();
}

void ProjectDocument::removeVariant(const QString& name) {
    mProject->removeVariant(name.toStdString());   // an assumed basis stays, for undo (addVariant)
    if (mCurrentVariant == name)
        setCurrentVariant(mProject->variants().empty() ? QString() : QString::fromStdString(mProject->variants().back().name));
    emit variantsChanged();
    emit resultsChanged();
}

void ProjectDocument::renameVariant(const QString& from, const QString& to) {
    mProject->renameVariant(from.toStdString(), to.toStdString());   // the recorded basis moves with the results
    const auto assumed = mAssumedBasis.find(from.toStdString());
    if (assumed != mAssumedBasis.end()) {
        mAssumedBasis[to.toStdString()] = std::move(assumed->second);
        mAssumedBasis.erase(from.toStdString());
    }
    emit variantsChanged();
    if (mCurrentVariant == from) setCurrentVariant(to);
    emit resultsChanged();
}

void ProjectDocument::setSettings(const ProjectSettings& settings) {
    mProject->setSettings(settings);
    emit settingsChanged();
    emit resultsChanged();   // measured with other settings now (resultsCurrent)
}

ProjectDocument::ModelState ProjectDocument::withTokenizer(const QString& path) const {
    const std::string file = absolutePath(path);
    std::unique_ptr<Model> model = mModel->clone();
    model->derived = false;             // the file's weights as read, with another tokenizer
    applyTokenizerFile(*model, file);   // refuses a tokenizer the model cannot use
    ModelState state{mProject->model(), std::move(model)};
    state.reference.tokenizer = file;
    state.reference.tokenizerHash = hashTokenizer(file);
    return state;
}

void ProjectDocument::setModelState(const ModelState& state) {
    mProject->setModel(state.reference);
    mProject->record("tokenizer", {{"path", state.reference.tokenizer}, {"hash", state.reference.tokenizerHash}});
    mModel = state.model;
    emit modelChanged();
    emit resultsChanged();   // measured with another tokenizer now (resultsCurrent)
}

void ProjectDocument::assumeBasisIfUnrecorded(const std::string& variant) {
    mAssumedBasis.erase(variant);
    if (!mProject->results(variant).empty() && mProject->resultBasis(variant).is_null())
        mAssumedBasis[variant] = mProject->measurementBasis(variant);
}

QStringList ProjectDocument::resultsOutdatedBy(const QString& variant) const {
    const std::string name = variant.toStdString();
    if (name != Project::kBaseName && !mProject->hasVariant(name)) return {};
    std::vector<std::string> reasons = mProject->resultsOutdatedBy(name);
    const auto assumed = mAssumedBasis.find(name);
    if (assumed != mAssumedBasis.end() && mProject->resultBasis(name).is_null() && !mProject->results(name).empty())
        reasons = Project::basisDifferences(assumed->second, mProject->measurementBasis(name));
    QStringList list;
    for (const auto& r : reasons) list << QString::fromStdString(r);
    return list;
}

nlohmann::json ProjectDocument::resultBasis(const QString& variant) const {
    const std::string name = variant.toStdString();
    const nlohmann::json& recorded = mProject->resultBasis(name);
    if (!recorded.is_null()) return recorded;
    const auto assumed = mAssumedBasis.find(name);
    return assumed == mAssumedBasis.end() ? nlohmann::json() : assumed->second;
}

void ProjectDocument::setResults(const QString& variant, const std::vector<ResultRow>& rows,
                                 const std::optional<nlohmann::json>& basis) {
    const std::string name = variant.toStdString();
    mProject->setResults(name, rows, basis ? *basis : mProject->measurementBasis(name));
    mAssumedBasis.erase(name);
    markUnsavedData();
    emit resultsChanged();
}

void ProjectDocument::setImportance(const ImportanceMap& map) {
    mProject->setImportance(map);
    markUnsavedData();
    emit importanceChanged();
}

} // namespace cwb
