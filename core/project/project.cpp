#include "core/project/project.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <ctime>
#include <memory>
#include <mutex>

#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/project/file_hash.h"
#include "core/project/project_schema.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

namespace cwb {

namespace {

using nlohmann::json;
using project_schema::Database;
using project_schema::Statement;
using project_schema::inTransaction;
using project_schema::useRollbackJournal;

std::mutex gWriterMutex;
WrittenBy gWriter{"cwb (unknown version)", "", "", 0};

bool sameDouble(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

std::string encodeDoubles(const std::vector<double>& values) {
    std::string bytes(values.size() * 8, '\0');
    for (size_t i = 0; i < values.size(); ++i) {
        uint64_t bits;
        std::memcpy(&bits, &values[i], 8);
        for (int b = 0; b < 8; ++b) bytes[i * 8 + b] = char((bits >> (8 * b)) & 0xff);
    }
    return bytes;
}

std::vector<double> decodeDoubles(const std::string& bytes, const std::string& file) {
    if (bytes.size() % 8 != 0) throw Error(file, "is damaged: importance values are not whole doubles");
    std::vector<double> values(bytes.size() / 8);
    for (size_t i = 0; i < values.size(); ++i) {
        uint64_t bits = 0;
        for (int b = 0; b < 8; ++b) bits |= uint64_t(static_cast<unsigned char>(bytes[i * 8 + b])) << (8 * b);
        std::memcpy(&values[i], &bits, 8);
    }
    return values;
}

struct stat statOrThrow(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(path, "does not exist");
    if (S_ISDIR(st.st_mode)) throw Error(path, "is a folder, not a cwb project");
    return st;
}

} // namespace

// ---- reading and writing ------------------------------------------------------------------------

class ProjectReader {
public:
    static void read(Database& db, Project& p) {
        const std::string& file = db.file();
        Statement model(db, "SELECT path, format, bytes, hash FROM model WHERE id = 1");
        if (!model.step()) throw Error(file, "is damaged: it names no model");
        p.mModel = ModelReference();   // the tokenizer and its hash come from the meta table below
        p.mModel.path = model.text(0);
        p.mModel.format = model.text(1);
        p.mModel.bytes = model.unsignedInteger(2);
        p.mModel.hash = model.text(3);

        Statement s(db,
                    "SELECT calibration_path, calibration_hash, calibration_bytes, calibration_samples, "
                    "calibration_seq_len, calibration_seed, evaluation_path, evaluation_hash, evaluation_bytes, "
                    "eval_ctx, eval_chunks FROM settings WHERE id = 1");
        if (!s.step()) throw Error(file, "is damaged: it has no settings");
        ProjectSettings& t = p.mSettings;
        t.calibration = {s.text(0), s.text(1), s.unsignedInteger(2)};
        t.calibrationSamples = s.integer(3);
        t.calibrationSeqLen = s.integer(4);
        t.calibrationSeed = s.unsignedInteger(5);
        t.evaluation = {s.text(6), s.text(7), s.unsignedInteger(8)};
        t.evalCtx = s.integer(9);
        t.evalChunks = s.integer(10);

        Statement v(db, "SELECT name, coalesce(parent, ''), recipe, created, exports FROM variants ORDER BY position");
        while (v.step()) {
            const std::string name = v.text(0);
            p.mVariants.push_back({name, v.text(1), v.jsonValue(2, "the recipe of '" + name + "'"), v.text(3),
                                   v.jsonValue(4, "the exports of '" + name + "'")});
            const std::string bad = exportEntriesProblem(p.mVariants.back().exports);
            if (!bad.empty()) throw Error(file, "is damaged: the exports of variant '" + name + "': " + bad);
        }

        Statement r(db, "SELECT variant, metric, value, error, device, threads, seconds, time, build "
                        "FROM results ORDER BY id");
        while (r.step())
            p.mResults.push_back({r.text(0), r.text(1), r.real(2), r.real(3), r.text(4), int(r.integer(5)),
                                  r.real(6), r.text(7), r.text(8)});

        Statement b(db, "SELECT variant, basis FROM result_basis");
        while (b.step()) {
            const std::string name = b.text(0);
            p.mResultBasis[name] = b.jsonValue(1, "what the results of '" + name + "' were measured from");
        }

        Statement m(db, "SELECT kind, row_labels, column_labels, vals, measured FROM importance ORDER BY kind");
        while (m.step()) {
            ImportanceMap map;
            map.kind = m.text(0);
            try {
                map.rowLabels = m.jsonValue(1, "importance labels").get<std::vector<std::string>>();
                map.columnLabels = m.jsonValue(2, "importance labels").get<std::vector<std::string>>();
            } catch (const json::exception&) {
                throw Error(file, "is damaged: the labels of importance map '" + map.kind + "' are not strings");
            }
            map.values = decodeDoubles(m.blob(3), file);
            map.measuredWith = m.jsonValue(4, "what importance map '" + map.kind + "' was measured on");
            if (map.values.size() != map.rowLabels.size() * map.columnLabels.size())
                throw Error(file, "is damaged: importance map '" + map.kind + "' has the wrong number of values");
            p.mImportance.push_back(std::move(map));
        }

        Statement j(db, "SELECT time, action, detail FROM journal ORDER BY id");
        while (j.step()) p.mJournal.push_back({j.text(0), j.text(1), j.jsonValue(2, "a journal entry")});

        Statement w(db, "SELECT key, value FROM meta WHERE key IN ('written_app', 'written_torch', 'written_cuda')");
        while (w.step()) {
            const std::string key = w.text(0);
            (key == "written_app" ? p.mWrittenBy.app : key == "written_torch" ? p.mWrittenBy.torch
                                                                              : p.mWrittenBy.cuda) = w.text(1);
        }
        Statement tok(db, "SELECT value FROM meta WHERE key = 'model_tokenizer'");
        if (tok.step()) p.mModel.tokenizer = tok.text(0);
        Statement tokHash(db, "SELECT value FROM meta WHERE key = 'model_tokenizer_hash'");
        if (tokHash.step()) p.mModel.tokenizerHash = tokHash.text(0);
        p.mWrittenBy.schema = project_schema::readVersion(db);
        p.mRevision = readRevision(db);
    }

    // How many saves the file has seen (0 before the first that counted them).
    static int64_t readRevision(Database& db) {
        Statement r(db, "SELECT value FROM meta WHERE key = 'revision'");
        if (!r.step()) return 0;
        try {
            return std::stoll(r.text(0));
        } catch (const std::exception&) {
            throw Error(db.file(), "is damaged: its revision is not a number");
        }
    }
};

class ProjectWriter {
public:
    // Replaces every row with the state of `p`; the caller holds the transaction.
    static void write(Database& db, const Project& p, const WrittenBy& writer) {
        for (const char* table : {"journal", "importance", "result_basis", "results", "variants", "settings", "model"}) {
            const std::string sql = std::string("DELETE FROM ") + table;   // table names are constants
            db.exec(sql.c_str(), "clearing the old state");
        }
        Statement model(db, "INSERT INTO model (id, path, format, bytes, hash) VALUES (1, ?, ?, ?, ?)");
        model.bind(1, p.mModel.path).bind(2, p.mModel.format).bindUnsigned(3, p.mModel.bytes).bind(4, p.mModel.hash);
        model.run();

        const ProjectSettings& t = p.mSettings;
        Statement s(db, "INSERT INTO settings (id, calibration_path, calibration_hash, calibration_bytes, "
                        "calibration_samples, calibration_seq_len, calibration_seed, evaluation_path, "
                        "evaluation_hash, evaluation_bytes, eval_ctx, eval_chunks) "
                        "VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        s.bind(1, t.calibration.path).bind(2, t.calibration.hash).bindUnsigned(3, t.calibration.bytes);
        s.bind(4, t.calibrationSamples).bind(5, t.calibrationSeqLen).bindUnsigned(6, t.calibrationSeed);
        s.bind(7, t.evaluation.path).bind(8, t.evaluation.hash).bindUnsigned(9, t.evaluation.bytes);
        s.bind(10, t.evalCtx).bind(11, t.evalChunks);
        s.run();

        Statement v(db, "INSERT INTO variants (name, parent, position, recipe, created, exports) "
                        "VALUES (?, nullif(?, ''), ?, ?, ?, ?)");
        int64_t position = 0;
        for (const Variant& x : p.mVariants) {
            v.bind(1, x.name).bind(2, x.parent).bind(3, position++).bindJson(4, x.recipe).bind(5, x.created);
            v.bindJson(6, x.exports).run();
        }

        Statement r(db, "INSERT INTO results (variant, metric, value, error, device, threads, seconds, time, build) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
        for (const ResultRow& x : p.mResults) {
            r.bind(1, x.variant).bind(2, x.metric).bind(3, x.value).bind(4, x.error).bind(5, x.device);
            r.bind(6, int64_t(x.threads)).bind(7, x.seconds).bind(8, x.time).bind(9, x.build).run();
        }

        Statement b(db, "INSERT INTO result_basis (variant, basis) VALUES (?, ?)");
        for (const auto& [variant, basis] : p.mResultBasis) b.bind(1, variant).bindJson(2, basis).run();

        Statement m(db, "INSERT INTO importance (kind, row_labels, column_labels, vals, measured) VALUES (?, ?, ?, ?, ?)");
        for (const ImportanceMap& x : p.mImportance) {
            m.bind(1, x.kind).bindJson(2, json(x.rowLabels)).bindJson(3, json(x.columnLabels));
            m.bindBlob(4, encodeDoubles(x.values)).bindJson(5, x.measuredWith).run();
        }

        Statement j(db, "INSERT INTO journal (time, action, detail) VALUES (?, ?, ?)");
        for (const JournalEntry& x : p.mJournal) j.bind(1, x.time).bind(2, x.action).bindJson(3, x.detail).run();

        Statement w(db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)");
        w.bind(1, std::string("written_app")).bind(2, writer.app).run();
        w.bind(1, std::string("written_torch")).bind(2, writer.torch).run();
        w.bind(1, std::string("written_cuda")).bind(2, writer.cuda).run();
        if (!p.mModel.tokenizer.empty()) w.bind(1, std::string("model_tokenizer")).bind(2, p.mModel.tokenizer).run();
        else db.exec("DELETE FROM meta WHERE key = 'model_tokenizer'", "clearing the old state");
        if (!p.mModel.tokenizerHash.empty())
            w.bind(1, std::string("model_tokenizer_hash")).bind(2, p.mModel.tokenizerHash).run();
        else db.exec("DELETE FROM meta WHERE key = 'model_tokenizer_hash'", "clearing the old state");
        w.bind(1, std::string("revision")).bind(2, std::to_string(p.mRevision)).run();
    }
};

// ---- Project ------------------------------------------------------------------------------------

Project Project::create(const std::string& path, const ModelReference& model, const ProjectSettings& settings) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) throw Error(path, "already exists; refusing to overwrite it");
    Project p;
    p.mPath = path;
    p.mModel = model;
    p.mSettings = settings;
    const WrittenBy writer = [] { std::lock_guard<std::mutex> lock(gWriterMutex); return gWriter; }();
    try {
        Database db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        useRollbackJournal(db);
        inTransaction(db, "BEGIN IMMEDIATE", [&] {
            db.exec(project_schema::ddlCurrent(), "creating the tables");
            static_assert(project_schema::kApplicationId == 1129792080, "keep the PRAGMA below in step");
            db.exec("PRAGMA application_id = 1129792080", "setting the application id");
            ProjectWriter::write(db, p, writer);
        });
    } catch (...) {
        for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
        throw;
    }
    p.mWrittenBy = writer;
    p.mWrittenBy.schema = project_schema::kCurrentVersion;
    return p;
}

namespace {

// An SQLite URI for `path` (percent-escaping what a URI gives meaning to), with `query`.
std::string sqliteUri(const std::string& path, const std::string& query) {
    std::string uri = "file:";
    for (unsigned char c : path) {
        if (c == '%' || c == '?' || c == '#' || c < 0x20) {
            char hex[4];
            std::snprintf(hex, sizeof hex, "%%%02X", c);
            uri += hex;
        } else {
            uri += char(c);
        }
    }
    return uri + "?" + query;
}

bool canWrite(const std::string& path) {
    const std::string folder = std::filesystem::path(path).parent_path().string();
    return ::access(path.c_str(), W_OK) == 0 && ::access(folder.empty() ? "." : folder.c_str(), W_OK | X_OK) == 0;
}

} // namespace

Project Project::open(const std::string& path, Access access) {
    const struct stat st = statOrThrow(path);
    if (st.st_size == 0) throw Error(path, "is not a cwb project (empty file)");
    const bool readOnly = access == Access::ReadOnly || !canWrite(path);
    // Read-only media or files: no journal is written. A file a WAL build left needs its -shm to be read, which
    // cannot be made there; with no -wal beside it, nothing is pending and it is read as immutable.
    std::unique_ptr<Database> opened;
    if (!readOnly) {
        opened = std::make_unique<Database>(path, SQLITE_OPEN_READWRITE);
    } else {
        struct stat wal {};
        const bool pending = ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0;
        opened = std::make_unique<Database>(sqliteUri(path, pending ? "mode=ro" : "immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                                            path);
    }
    const int version = project_schema::readVersion(*opened);
    project_schema::checkReadable(version, path);
    if (version < project_schema::kCurrentVersion && readOnly) {
        // An older file opened read-only is migrated in a copy in memory: the file stays as it is, and commands that
        // only read (show, --batch, export) still read projects an older build wrote.
        auto copy = std::make_unique<Database>(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, path);
        sqlite3_backup* backup = sqlite3_backup_init(copy->handle(), "main", opened->handle(), "main");
        if (!backup) copy->fail(sqlite3_errcode(copy->handle()), "copying the project to update its schema in memory");
        sqlite3_backup_step(backup, -1);
        const int rc = sqlite3_backup_finish(backup);
        if (rc != SQLITE_OK) opened->fail(rc, "copying the project to update its schema in memory");
        inTransaction(*copy, "BEGIN", [&] { project_schema::migrate(*copy, version); });
        opened = std::move(copy);
    } else if (version < project_schema::kCurrentVersion) {
        Database& db = *opened;
        useRollbackJournal(db);
        inTransaction(db, "BEGIN IMMEDIATE", [&] {
            if (project_schema::readVersion(db) != version) return;   // another process migrated it meanwhile
            project_schema::migrate(db, version);
            Statement j(db, "INSERT INTO journal (time, action, detail) VALUES (?, ?, ?)");
            j.bind(1, currentTime()).bind(2, std::string("project.migrate"));
            j.bindJson(3, json{{"from", version}, {"to", project_schema::kCurrentVersion}}).run();
        });
    }
    Database& db = *opened;
    Project p;
    p.mPath = path;
    p.mReadOnly = readOnly;
    inTransaction(db, "BEGIN", [&] {
        project_schema::checkReadable(project_schema::readVersion(db), path);
        ProjectReader::read(db, p);
    });
    if (readOnly) p.mWrittenBy.schema = version;   // the file's, not that of its copy migrated in memory
    p.checkLineage();
    return p;
}

void Project::save() {
    if (mReadOnly)
        throw Error(mPath, "was opened read-only (by a command that only reads it, or the file or its folder cannot be "
                           "written); save it under another name");
    statOrThrow(mPath);
    WrittenBy writer = [] { std::lock_guard<std::mutex> lock(gWriterMutex); return gWriter; }();
    writer.schema = project_schema::kCurrentVersion;
    Database db(mPath, SQLITE_OPEN_READWRITE);
    useRollbackJournal(db);
    // Every save rewrites the whole file from memory, so a save over another program's since this one read it would
    // silently drop that program's changes: refused instead (the caller may read it again and redo its change).
    const int64_t revision = mRevision;
    try {
        inTransaction(db, "BEGIN IMMEDIATE", [&] {
            const int version = project_schema::readVersion(db);
            if (version != project_schema::kCurrentVersion)
                throw Error(mPath, "changed on disk to schema " + std::to_string(version) + "; reopen it before saving");
            const int64_t onDisk = ProjectReader::readRevision(db);
            if (onDisk != revision)
                throw ChangedOnDisk(mPath, "was changed by another program since it was read; nothing was saved (read it "
                                           "again and redo the change, or save under another name)");
            mRevision = revision + 1;
            ProjectWriter::write(db, *this, writer);
        });
    } catch (...) {
        mRevision = revision;
        throw;
    }
    mWrittenBy = writer;
    mModified = false;
    // The autosave is left alone: it may be a GUI's unsaved work on this file, which a CLI save must not delete.
    // The GUI drops its own when it saves (ProjectDocument::save).
}

std::string Project::autosavePath(const std::string& path) { return path + ".autosave"; }

bool Project::hasAutosave(const std::string& path) {
    struct stat st {};
    return ::stat(autosavePath(path).c_str(), &st) == 0;
}

void Project::discardAutosave(const std::string& path) {
    for (const std::string& file : {autosavePath(path), autosaveBasePath(path)})
        for (const char* suffix : {"", "-journal", ".tmp", ".tmp-journal"}) std::remove((file + suffix).c_str());
}

void Project::autosave() const { writeCopy(autosavePath(mPath)); }

std::string Project::autosaveBasePath(const std::string& path) { return path + ".autosave.base"; }

void Project::autosaveBase(const Project& lastSaved) const { lastSaved.writeCopy(autosaveBasePath(mPath)); }

std::unique_ptr<Project> Project::recoverAutosaveBase(const std::string& path) {
    const std::string basePath = autosaveBasePath(path);
    struct stat st {};
    if (::stat(basePath.c_str(), &st) != 0) return nullptr;
    auto base = std::make_unique<Project>(open(basePath, Access::ReadOnly));
    const Project autosaved = open(autosavePath(path), Access::ReadOnly);
    // A base of another revision would merge against the wrong file state: the recovered project is then not merged.
    if (base->mRevision != autosaved.mRevision) return nullptr;
    base->mPath = path;
    return base;
}

void Project::writeCopy(const std::string& target) const {
    const std::string tmp = createSiblingFile(target);   // empty: SQLite takes it as a new database
    WrittenBy writer = [] { std::lock_guard<std::mutex> lock(gWriterMutex); return gWriter; }();
    writer.schema = project_schema::kCurrentVersion;
    try {
        // A rollback journal, not WAL: after the commit the file alone is complete, so it can be renamed.
        Database db(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        inTransaction(db, "BEGIN IMMEDIATE", [&] {
            db.exec(project_schema::ddlCurrent(), "creating the tables");
            db.exec("PRAGMA application_id = 1129792080", "setting the application id");
            ProjectWriter::write(db, *this, writer);
        });
    } catch (...) {
        for (const char* suffix : {"", "-journal"}) std::remove((tmp + suffix).c_str());
        throw;
    }
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
        const int error = errno;
        std::remove(tmp.c_str());
        throw Error(target, std::string("cannot move the written project into place: ") + std::strerror(error));
    }
}

Project Project::recoverAutosave(const std::string& path) {
    Project p = open(autosavePath(path));
    p.mPath = path;
    p.mModified = true;
    return p;
}

void Project::setWriter(const std::string& app, const std::string& torch, const std::string& cuda) {
    std::lock_guard<std::mutex> lock(gWriterMutex);
    gWriter = {app, torch, cuda, 0};
}

std::vector<ResultRow> Project::results(const std::string& variant) const {
    std::vector<ResultRow> rows;
    for (const ResultRow& r : mResults)
        if (r.variant == variant) rows.push_back(r);
    return rows;
}

const ImportanceMap* Project::importance(const std::string& kind) const {
    for (const ImportanceMap& m : mImportance)
        if (m.kind == kind) return &m;
    return nullptr;
}

void Project::setModel(const ModelReference& model) {
    mModel = model;
    mModified = true;
}

void Project::setSettings(const ProjectSettings& settings) {
    mSettings = settings;
    mModified = true;
}

std::string Project::newNameProblem(const std::string& name) {
    if (name.find(',') != std::string::npos)
        return "variant name '" + name + "' has a comma, which separates names in --variants lists";
    // Its exports are named after it ("NAME-hf"), so it must be a plain file name (user probe: 'a/b' was taken, and
    // its export then refused a --file no one gave).
    if (name.find_first_of("/\\") != std::string::npos)
        return "variant name '" + name + "' has a slash; its exports are files named after it, so choose a name without one";
    if (std::any_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
        return "variant name '" + name + "' has a control character";
    if (!name.empty() && (std::isspace(static_cast<unsigned char>(name.front())) || std::isspace(static_cast<unsigned char>(name.back()))))
        return "variant name '" + name + "' starts or ends with a space";
    return "";
}

void Project::addVariant(Variant variant) {
    if (variant.parent == kBaseName) variant.parent.clear();
    const std::string& name = variant.name;
    if (name.empty()) throw Error(mPath, "a variant needs a name");
    if (name == kBaseName) throw Error(mPath, "'base' is reserved for the base model");
    if (hasVariant(name)) throw Error(mPath, "variant '" + name + "' already exists");
    if (variant.parent == name) throw Error(mPath, "variant '" + name + "' cannot derive from itself");
    if (!variant.parent.empty() && !hasVariant(variant.parent))
        throw Error(mPath, "variant '" + name + "': unknown parent '" + variant.parent + "'");
    if (!variant.recipe.is_object() || !variant.recipe.contains("steps") || !variant.recipe["steps"].is_array())
        throw Error(mPath, "variant '" + name + "': the recipe must be an object with a \"steps\" array");
    const std::string badExports = exportEntriesProblem(variant.exports);
    if (!badExports.empty()) throw Error(mPath, "variant '" + name + "': exports: " + badExports);
    if (variant.created.empty()) variant.created = currentTime();
    mVariants.push_back(std::move(variant));
    try {
        checkLineage();
    } catch (...) {
        mVariants.pop_back();
        throw;
    }
    mModified = true;
}

void Project::removeVariant(const std::string& name) {
    findVariant(name);
    for (const Variant& v : mVariants)
        if (v.parent == name)
            throw Error(mPath, "variant '" + name + "' cannot be removed: '" + v.name + "' derives from it");
    mVariants.erase(std::remove_if(mVariants.begin(), mVariants.end(), [&](const Variant& v) { return v.name == name; }),
                    mVariants.end());
    mResults.erase(std::remove_if(mResults.begin(), mResults.end(), [&](const ResultRow& r) { return r.variant == name; }),
                   mResults.end());
    mResultBasis.erase(name);
    mModified = true;
}

void Project::renameVariant(const std::string& from, const std::string& to) {
    Variant& variant = findVariant(from);
    if (to == from) return;
    if (to.empty()) throw Error(mPath, "a variant needs a name");
    if (to == kBaseName) throw Error(mPath, "'base' is reserved for the base model");
    if (hasVariant(to)) throw Error(mPath, "variant '" + to + "' already exists");
    variant.name = to;
    for (Variant& v : mVariants)
        if (v.parent == from) v.parent = to;
    for (ResultRow& r : mResults)
        if (r.variant == from) r.variant = to;
    const auto basis = mResultBasis.find(from);
    if (basis != mResultBasis.end()) {   // recipes, not names, are measured from: the basis moves unchanged
        mResultBasis[to] = std::move(basis->second);
        mResultBasis.erase(from);
    }
    mModified = true;
}

void Project::setRecipe(const std::string& name, nlohmann::json recipe) {
    if (!recipe.is_object() || !recipe.contains("steps") || !recipe["steps"].is_array())
        throw Error(mPath, "variant '" + name + "': the recipe must be an object with a \"steps\" array");
    findVariant(name).recipe = std::move(recipe);
    mModified = true;
}

FileReference textFileReference(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw Error(path, "is a folder; give a text file");
    if (!std::filesystem::is_regular_file(path, ec)) throw Error(path, "no such file");
    const std::string text = readTextFile(path);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(path, "the text is empty");
    return {std::filesystem::absolute(path).lexically_normal().string(), hashFile(path), fileBytes(path)};
}

void checkStoredSettings(const ProjectSettings& s, const std::string& projectPath) {
    constexpr int64_t unbounded = std::numeric_limits<int64_t>::max();
    struct Bound {
        const char* column;
        const char* option;
        int64_t value, least, most;
    };
    const Bound bounds[] = {
        {"calibration_samples", "--samples", s.calibrationSamples, kLeastCalibrationSamples, kMostCalibrationSamples},
        {"calibration_seq_len", "--seq-len", s.calibrationSeqLen, kLeastCalibrationSeqLen, unbounded},
        {"eval_ctx", "--ctx", s.evalCtx, kLeastEvalCtx, unbounded},
        {"eval_chunks", "--chunks", s.evalChunks == -1 ? 1 : s.evalChunks, 1, unbounded}};   // -1: every chunk
    for (const Bound& b : bounds) {
        if (b.value >= b.least && b.value <= b.most) continue;
        const std::string limit = b.value < b.least ? "at least " + std::to_string(b.least) + " is needed"
                                                    : "at most " + std::to_string(b.most) + " is allowed";
        throw Error(projectPath, std::string("its setting ") + b.column + " is " + std::to_string(b.value) + ", " + limit +
                                     "; store another with cwb project set " + projectPath + " " + b.option + " N");
    }
}

const FileReference& measurementText(const ProjectSettings& s) {
    return s.calibration.path.empty() ? s.evaluation : s.calibration;
}

std::string evaluationStandInWarning(const ProjectSettings& s) {
    if (s.evaluation.path.empty()) return "";
    const std::string fitted = ": layers chosen from it are fitted to the text perplexity is measured on; set a calibration "
                               "text of its own to keep the two apart";
    if (s.calibration.path.empty())
        return "measured on the evaluation text " + s.evaluation.path + " (the project has no calibration text)" + fitted;
    // The same file, or the same content under another name (GUI probe: only a missing calibration text was warned).
    if (s.calibration.path == s.evaluation.path || (!s.calibration.hash.empty() && s.calibration.hash == s.evaluation.hash))
        return "measured on the evaluation text " + s.evaluation.path + " (the calibration text is the same text)" + fitted;
    return "";
}

TextHashes textHashesOnDisk(const ProjectSettings& settings) {
    const auto now = [](const FileReference& ref) {
        std::error_code ec;
        if (ref.path.empty() || ref.hash.empty() || !std::filesystem::is_regular_file(ref.path, ec)) return ref.hash;
        try {
            return hashFile(ref.path);
        } catch (const Error&) {   // unreadable: kept as recorded; reading it for a run says why
            return ref.hash;
        }
    };
    return {now(settings.evaluation), now(settings.calibration)};
}

json withTextHashes(json basis, const TextHashes& texts) {
    for (const auto& [part, hash] : {std::make_pair("evaluation", &texts.evaluation), std::make_pair("calibration", &texts.calibration)})
        if (basis.contains(part) && basis[part].contains("hash")) basis[part]["hash"] = *hash;
    return basis;
}

std::string exportEntriesProblem(const nlohmann::json& exports) {
    if (!exports.is_array()) return "not a list";
    for (const auto& e : exports) {
        if (!e.is_object()) return "an entry is not an object: " + e.dump();
        if (!e.contains("format") || !e["format"].is_string()) return "an entry has no format: " + e.dump();
        if (e.contains("type") && !e["type"].is_string()) return "an entry's type is not text: " + e.dump();
        if (e.contains("requantize") && !e["requantize"].is_string()) return "an entry's requantize type is not text: " + e.dump();
        if (e.contains("pack_head") && !e["pack_head"].is_boolean()) return "an entry's pack_head is not true or false: " + e.dump();
        if (!e.contains("file") || !e["file"].is_string()) return "an entry has no file name: " + e.dump();
        const std::string file = e["file"];
        const bool control = std::any_of(file.begin(), file.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
        if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
            file.find('\\') != std::string::npos || control)
            return "'" + file + "' is not a plain file or folder name (exports land in the batch's --out folder)";
    }
    return "";
}

void Project::setExports(const std::string& name, nlohmann::json exports) {
    const std::string bad = exportEntriesProblem(exports);
    if (!bad.empty()) throw Error(mPath, "variant '" + name + "': exports: " + bad);
    Variant& variant = findVariant(name);
    json kept = std::move(variant.exports);
    variant.exports = std::move(exports);
    // Only clashes this variant's entries take part in: one between two others (from an older build) is left to
    // --batch, and must not block this change.
    std::string clash = exportClashes({name});
    for (const Variant& v : mVariants) {
        if (v.name == name || !clash.empty()) continue;
        for (const auto& mine : variant.exports)
            for (const auto& other : v.exports)
                if (clash.empty() && mine.value("file", "") == other.value("file", ""))
                    clash = "'" + mine.value("file", "") + "' is written by two export entries (of variants '" + v.name +
                            "' and '" + name + "'); the later would replace the earlier";
    }
    if (!clash.empty()) {
        variant.exports = std::move(kept);
        throw Error(mPath, "variant '" + name + "': exports: " + clash);
    }
    mModified = true;
}

std::string Project::exportClashes(const std::vector<std::string>& variants) const {
    std::map<std::string, std::string> writer;   // file -> the variant whose entry writes it
    for (const std::string& name : variants) {
        if (name == kBaseName) continue;
        for (const auto& e : variant(name).exports) {
            const std::string file = e.value("file", "");
            const auto [at, added] = writer.emplace(file, name);
            if (!added)
                return "'" + file + "' is written by two export entries (" +
                       (at->second == name ? "both of variant '" + name + "'" : "of variants '" + at->second + "' and '" + name + "'") +
                       "); the later would replace the earlier";
        }
    }
    return "";
}

bool Project::hasVariant(const std::string& name) const {
    return std::any_of(mVariants.begin(), mVariants.end(), [&](const Variant& v) { return v.name == name; });
}

const Variant& Project::variant(const std::string& name) const {
    for (const Variant& v : mVariants)
        if (v.name == name) return v;
    throw Error(mPath, "no variant named '" + name + "'");
}

Variant& Project::findVariant(const std::string& name) {
    return const_cast<Variant&>(static_cast<const Project*>(this)->variant(name));
}

std::vector<std::string> Project::lineage(const std::string& name) const {
    std::vector<std::string> chain;
    for (std::string at = name; at != kBaseName && !at.empty(); at = variant(at).parent) {
        if (chain.size() > mVariants.size()) throw Error(mPath, "variant '" + name + "' has a parent cycle");
        chain.push_back(at);
    }
    std::reverse(chain.begin(), chain.end());
    return chain;
}

void Project::checkLineage() const {
    for (const Variant& v : mVariants) {
        if (!v.parent.empty() && !hasVariant(v.parent))
            throw Error(mPath, "variant '" + v.name + "': unknown parent '" + v.parent + "'");
        lineage(v.name);
    }
}

void Project::setResults(const std::string& variant, std::vector<ResultRow> rows, nlohmann::json basis) {
    if (variant != kBaseName && !hasVariant(variant)) throw Error(mPath, "no variant named '" + variant + "'");
    if (rows.empty() || basis.is_null()) mResultBasis.erase(variant);
    else mResultBasis[variant] = std::move(basis);
    mResults.erase(std::remove_if(mResults.begin(), mResults.end(), [&](const ResultRow& r) { return r.variant == variant; }),
                   mResults.end());
    for (ResultRow& r : rows) {
        r.variant = variant;
        mResults.push_back(std::move(r));
    }
    mModified = true;
}

const nlohmann::json& Project::resultBasis(const std::string& variant) const {
    static const json none;
    const auto found = mResultBasis.find(variant);
    return found == mResultBasis.end() ? none : found->second;
}

json Project::measurementBasis(const std::string& variant) const {
    return measurementBasis(variant, mModel.hash, mModel.tokenizerHash);
}

json Project::measurementBasis(const std::string& variant, const std::string& modelHash,
                               const std::string& tokenizerHash) const {
    // A file without a hash (never hashed) is known by its path alone.
    auto data = [](const FileReference& f) { return f.hash.empty() ? json{{"path", f.path}} : json{{"hash", f.hash}}; };
    json basis;
    basis["steps"] = json::array();
    if (variant != kBaseName)
        for (const std::string& name : lineage(variant)) basis["steps"].push_back(this->variant(name).recipe.value("steps", json::array()));
    basis["model"] = modelHash;
    basis["tokenizer"] = tokenizerHash;
    basis["evaluation"] = data(mSettings.evaluation);
    basis["evaluation"]["ctx"] = mSettings.evalCtx;
    basis["evaluation"]["chunks"] = mSettings.evalChunks;
    if (variant != kBaseName) {
        basis["calibration"] = data(mSettings.calibration);
        basis["calibration"]["samples"] = mSettings.calibrationSamples;
        basis["calibration"]["seq_len"] = mSettings.calibrationSeqLen;
        basis["calibration"]["seed"] = mSettings.calibrationSeed;
        // Since session 59 a variant of several steps stores per-layer errors against the base's weights (before, the
        // last step's against the weights the steps before it left): such results stored before are out of date.
        size_t enabled = 0;
        for (const auto& steps : basis["steps"])
            for (const auto& step : steps) enabled += step.value("enabled", true) ? 1 : 0;
        if (enabled > 1 && !mSettings.calibration.path.empty()) basis["layer_errors"] = "against the base";
    }
    return basis;
}

std::vector<std::string> Project::resultsOutdatedBy(const std::string& variant) const {
    const json& stored = resultBasis(variant);
    if (stored.is_null() || results(variant).empty()) return {};
    return basisDifferences(stored, measurementBasis(variant));
}

std::vector<std::string> Project::basisDifferences(const json& stored, const json& now) {
    static const std::pair<const char*, const char*> kParts[] = {
        {"steps", "its recipe or one it derives from changed"},
        {"model", "they were measured on another model file"},
        {"tokenizer", "they were measured with another tokenizer"},
        {"evaluation", "the evaluation text or windows changed"},
        {"calibration", "the calibration text or windows changed"},
        {"layer_errors", "its per-layer errors were measured against the step before, not the base (cwb before session 59)"},
    };
    std::vector<std::string> reasons;
    for (const auto& [part, reason] : kParts) {
        const json& before = stored.contains(part) ? stored[part] : json();
        const json& after = now.contains(part) ? now[part] : json();
        if (before != after) reasons.push_back(reason);
    }
    return reasons;
}

void Project::setImportance(ImportanceMap map) {
    if (map.kind.empty()) throw Error(mPath, "an importance map needs a kind");
    if (map.values.size() != map.rowLabels.size() * map.columnLabels.size())
        throw Error(mPath, "importance map '" + map.kind + "': " + std::to_string(map.values.size()) +
                               " values for " + std::to_string(map.rowLabels.size()) + " x " +
                               std::to_string(map.columnLabels.size()));
    removeImportance(map.kind);
    const auto at = std::lower_bound(mImportance.begin(), mImportance.end(), map.kind,
                                     [](const ImportanceMap& m, const std::string& k) { return m.kind < k; });
    mImportance.insert(at, std::move(map));
    mModified = true;
}

void Project::removeImportance(const std::string& kind) {
    mImportance.erase(std::remove_if(mImportance.begin(), mImportance.end(),
                                     [&](const ImportanceMap& m) { return m.kind == kind; }),
                      mImportance.end());
    mModified = true;
}

void Project::record(const std::string& action, const nlohmann::json& detail) {
    mJournal.push_back({currentTime(), action, detail});
    mModified = true;
}

std::string Project::currentTime() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

// ---- equality and JSON --------------------------------------------------------------------------

bool ModelReference::operator==(const ModelReference& o) const {
    return path == o.path && format == o.format && bytes == o.bytes && hash == o.hash && tokenizer == o.tokenizer &&
           tokenizerHash == o.tokenizerHash;
}

namespace {

// A GGUF file's tokenizer, hashed by what the loader takes from it (not the gigabytes of tensors after it).
std::string hashGgufTokenizer(const std::string& path) {
    const std::shared_ptr<const TokenizerData> d = loadGgufTokenizer(path)->vocabulary();
    uint64_t h = fnv1a64("gguf-tokenizer", 15);
    const auto text = [&](const std::string& t) { h = fnv1a64(t.data(), t.size() + 1, h); };   // with its 0 byte
    const auto number = [&](int64_t v) { h = fnv1a64(&v, sizeof v, h); };
    text(d->model);
    text(d->pre);
    number(int64_t(d->tokens.size()));
    for (const auto& t : d->tokens) text(t);
    h = fnv1a64(d->scores.data(), d->scores.size() * sizeof(float), h);
    h = fnv1a64(d->types.data(), d->types.size() * sizeof(int32_t), h);
    number(int64_t(d->merges.size()));
    for (const auto& m : d->merges) text(m);
    for (TokenId id : {d->bos, d->eos, d->unk, d->pad, d->sep, d->cls, d->mask}) number(id);
    for (TokenId id : d->stopIds) number(id);
    number(int64_t(d->addBos) | int64_t(d->addEos) << 1 | int64_t(d->addSpacePrefix) << 2 | int64_t(d->byteLevelPrefixSpace) << 3);
    text(d->chatTemplate);
    return formatHash(h);
}

} // namespace

std::string hashTokenizer(const std::string& path) {
    const std::vector<std::string> files = tokenizerFiles(path);
    if (files.size() == 1 && files.front().size() > 5 && files.front().compare(files.front().size() - 5, 5, ".gguf") == 0)
        return hashGgufTokenizer(files.front());
    // The tokenizer file under one label whatever its name (tok512.bin renamed tokenizer.bin reads the same); the
    // files beside a tokenizer.json under their own names, which the loader looks for.
    std::vector<std::pair<std::string, std::string>> labelled = {{"tokenizer", files.front()}};
    for (size_t i = 1; i < files.size(); ++i)
        labelled.emplace_back(std::filesystem::path(files[i]).filename().string(), files[i]);
    return hashFiles(labelled);
}

namespace {

// The tokenizer file a model was read with (Model::metadata "tokenizer": a given one, or a llama2.c checkpoint's found
// beside it); "" when its tokenizer came from the model's own file or folder.
std::string tokenizerFileOf(const Model& model) {
    const auto found = model.metadata.find("tokenizer");
    return found != model.metadata.end() ? found->second : std::string();
}

} // namespace

std::string tokenizerChangeWarning(const ModelReference& recorded, const std::string& given, const Model& loaded,
                                   std::string* usedHash) {
    if (usedHash) usedHash->clear();
    const std::string used = given.empty() ? tokenizerFileOf(loaded) : given;
    if (used.empty()) return "";
    const std::string hash = hashTokenizer(used);
    if (usedHash) *usedHash = hash;
    if (!given.empty() && recorded.tokenizer.empty())
        return "the project was measured with the model's own tokenizer; " + given + " replaces it, so results may differ";
    if (!recorded.tokenizerHash.empty() && hash != recorded.tokenizerHash)
        return std::string(given.empty() ? "the model's tokenizer file " + used : "the tokenizer's content") +
               " changed since the project was saved (hash " + recorded.tokenizerHash + " -> " + hash +
               "); results may differ";
    return "";
}

std::string tokenizerHashToRecord(const Model& model, const std::string& given) {
    const std::string file = given.empty() ? tokenizerFileOf(model) : given;
    return file.empty() ? std::string() : hashTokenizer(file);
}

LoadOptions ModelReference::loadOptions() const {
    LoadOptions options;
    options.tokenizerPath = tokenizer;
    return options;
}

bool ProjectSettings::operator==(const ProjectSettings& o) const {
    return calibration == o.calibration && calibrationSamples == o.calibrationSamples &&
           calibrationSeqLen == o.calibrationSeqLen && calibrationSeed == o.calibrationSeed &&
           evaluation == o.evaluation && evalCtx == o.evalCtx && evalChunks == o.evalChunks;
}

bool Variant::operator==(const Variant& o) const {
    return name == o.name && parent == o.parent && recipe == o.recipe && created == o.created && exports == o.exports;
}

bool ResultRow::operator==(const ResultRow& o) const {
    return variant == o.variant && metric == o.metric && sameDouble(value, o.value) && sameDouble(error, o.error) &&
           device == o.device && threads == o.threads && sameDouble(seconds, o.seconds) && time == o.time &&
           build == o.build;
}

bool ImportanceMap::operator==(const ImportanceMap& o) const {
    return kind == o.kind && rowLabels == o.rowLabels && columnLabels == o.columnLabels && measuredWith == o.measuredWith &&
           std::equal(values.begin(), values.end(), o.values.begin(), o.values.end(), sameDouble);
}

bool JournalEntry::operator==(const JournalEntry& o) const {
    return time == o.time && action == o.action && detail == o.detail;
}

bool WrittenBy::operator==(const WrittenBy& o) const {
    return app == o.app && torch == o.torch && cuda == o.cuda && schema == o.schema;
}

bool Project::operator==(const Project& o) const {
    return mModel == o.mModel && mSettings == o.mSettings && mVariants == o.mVariants && mResults == o.mResults &&
           mResultBasis == o.mResultBasis && mImportance == o.mImportance && mJournal == o.mJournal && mWrittenBy == o.mWrittenBy;
}

nlohmann::json Project::toJson() const {
    auto file = [](const FileReference& f) { return json{{"path", f.path}, {"hash", f.hash}, {"bytes", f.bytes}}; };
    auto number = [](double d) { return std::isnan(d) ? json(nullptr) : json(d); };
    json j;
    j["path"] = mPath;
    j["written_by"] = {{"app", mWrittenBy.app}, {"torch", mWrittenBy.torch}, {"cuda", mWrittenBy.cuda},
                       {"schema", mWrittenBy.schema}};
    j["model"] = {{"path", mModel.path}, {"format", mModel.format}, {"bytes", mModel.bytes}, {"hash", mModel.hash}};
    if (!mModel.tokenizer.empty()) j["model"]["tokenizer"] = mModel.tokenizer;
    if (!mModel.tokenizerHash.empty()) j["model"]["tokenizer_hash"] = mModel.tokenizerHash;
    j["settings"] = {{"calibration", file(mSettings.calibration)}, {"calibration_samples", mSettings.calibrationSamples},
                     {"calibration_seq_len", mSettings.calibrationSeqLen}, {"calibration_seed", mSettings.calibrationSeed},
                     {"evaluation", file(mSettings.evaluation)}, {"eval_ctx", mSettings.evalCtx},
                     {"eval_chunks", mSettings.evalChunks}};
    j["variants"] = json::array();
    for (const Variant& v : mVariants)
        j["variants"].push_back({{"name", v.name}, {"parent", v.parent.empty() ? kBaseName : v.parent},
                                 {"recipe", v.recipe}, {"created", v.created}, {"exports", v.exports}});
    j["results"] = json::array();
    for (const ResultRow& r : mResults)
        j["results"].push_back({{"variant", r.variant}, {"metric", r.metric}, {"value", number(r.value)},
                                {"error", number(r.error)}, {"device", r.device}, {"threads", r.threads},
                                {"seconds", number(r.seconds)}, {"time", r.time}, {"build", r.build}});
    j["result_basis"] = json::object();
    for (const auto& [variant, basis] : mResultBasis) j["result_basis"][variant] = basis;
    j["importance"] = json::array();
    for (const ImportanceMap& m : mImportance) {
        json values = json::array();
        for (double d : m.values) values.push_back(number(d));
        j["importance"].push_back({{"kind", m.kind}, {"rows", m.rowLabels}, {"columns", m.columnLabels},
                                   {"values", values}, {"measured_with", m.measuredWith}});
    }
    j["journal"] = json::array();
    for (const JournalEntry& e : mJournal)
        j["journal"].push_back({{"time", e.time}, {"action", e.action}, {"detail", e.detail}});
    return j;
}

} // namespace cwb
