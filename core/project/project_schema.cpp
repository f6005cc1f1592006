#include "core/project/project_schema.h"

#include <sqlite3.h>

#include <cmath>

#include "core/util/error.h"

namespace cwb::project_schema {

namespace {

// Version 1: the first layout released. Kept verbatim: tests build v1 files from it and migrations
// start from it, so it must never change.
const char* const kDdlV1 = R"sql(
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');
CREATE TABLE model (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    path   TEXT NOT NULL,
    format TEXT NOT NULL,
    bytes  INTEGER NOT NULL DEFAULT 0,
    hash   TEXT NOT NULL DEFAULT ''
);
CREATE TABLE settings (
    id                  INTEGER PRIMARY KEY CHECK (id = 1),
    calibration_path    TEXT NOT NULL DEFAULT '',
    calibration_hash    TEXT NOT NULL DEFAULT '',
    calibration_bytes   INTEGER NOT NULL DEFAULT 0,
    calibration_samples INTEGER NOT NULL DEFAULT 128,
    calibration_seq_len INTEGER NOT NULL DEFAULT 512,
    calibration_seed    INTEGER NOT NULL DEFAULT 0,
    evaluation_path     TEXT NOT NULL DEFAULT '',
    evaluation_hash     TEXT NOT NULL DEFAULT '',
    evaluation_bytes    INTEGER NOT NULL DEFAULT 0,
    eval_ctx            INTEGER NOT NULL DEFAULT 512,
    eval_chunks         INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE variants (
    name     TEXT PRIMARY KEY NOT NULL,
    parent   TEXT REFERENCES variants (name) DEFERRABLE INITIALLY DEFERRED,
    position INTEGER NOT NULL,
    recipe   TEXT NOT NULL,
    created  TEXT NOT NULL DEFAULT '',
    exports  TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE results (
    id      INTEGER PRIMARY KEY,
    variant TEXT NOT NULL,
    metric  TEXT NOT NULL,
    value   REAL,
    error   REAL,
    seconds REAL,
    time    TEXT NOT NULL DEFAULT '',
    build   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX results_by_variant ON results (variant);
)sql";

// 1 -> 2. Columns added by ALTER TABLE land at the end, which is why kDdlCurrent lists them last.
const char* const kMigrate1To2 = R"sql(
ALTER TABLE results ADD COLUMN device TEXT NOT NULL DEFAULT '';
ALTER TABLE results ADD COLUMN threads INTEGER NOT NULL DEFAULT 0;
CREATE TABLE importance (
    kind          TEXT PRIMARY KEY NOT NULL,
    row_labels    TEXT NOT NULL,
    column_labels TEXT NOT NULL,
    vals          BLOB NOT NULL
);
CREATE TABLE journal (
    id     INTEGER PRIMARY KEY,
    time   TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT 'null'
);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
)sql";

// 2 -> 3. Results and importance maps measured before version 3 get no record of what they were measured on.
const char* const kMigrate2To3 = R"sql(
ALTER TABLE importance ADD COLUMN measured TEXT NOT NULL DEFAULT 'null';
CREATE TABLE result_basis (
    variant TEXT PRIMARY KEY NOT NULL,
    basis   TEXT NOT NULL
);
UPDATE meta SET value = '3' WHERE key = 'schema_version';
)sql";

// Version 3 as created fresh; its columns match v1 + the migrations (a test compares the two).
const char* const kDdlCurrent = R"sql(
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '3');
CREATE TABLE model (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    path   TEXT NOT NULL,
    format TEXT NOT NULL,
    bytes  INTEGER NOT NULL DEFAULT 0,
    hash   TEXT NOT NULL DEFAULT ''
);
CREATE TABLE settings (
    id                  INTEGER PRIMARY KEY CHECK (id = 1),
    calibration_path    TEXT NOT NULL DEFAULT '',
    calibration_hash    TEXT NOT NULL DEFAULT '',
    calibration_bytes   INTEGER NOT NULL DEFAULT 0,
    calibration_samples INTEGER NOT NULL DEFAULT 128,
    calibration_seq_len INTEGER NOT NULL DEFAULT 512,
    calibration_seed    INTEGER NOT NULL DEFAULT 0,
    evaluation_path     TEXT NOT NULL DEFAULT '',
    evaluation_hash     TEXT NOT NULL DEFAULT '',
    evaluation_bytes    INTEGER NOT NULL DEFAULT 0,
    eval_ctx            INTEGER NOT NULL DEFAULT 512,
    eval_chunks         INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE variants (
    name     TEXT PRIMARY KEY NOT NULL,
    parent   TEXT REFERENCES variants (name) DEFERRABLE INITIALLY DEFERRED,
    position INTEGER NOT NULL,
    recipe   TEXT NOT NULL,
    created  TEXT NOT NULL DEFAULT '',
    exports  TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE results (
    id      INTEGER PRIMARY KEY,
    variant TEXT NOT NULL,
    metric  TEXT NOT NULL,
    value   REAL,
    error   REAL,
    seconds REAL,
    time    TEXT NOT NULL DEFAULT '',
    build   TEXT NOT NULL DEFAULT '',
    device  TEXT NOT NULL DEFAULT '',
    threads INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX results_by_variant ON results (variant);
CREATE TABLE importance (
    kind          TEXT PRIMARY KEY NOT NULL,
    row_labels    TEXT NOT NULL,
    column_labels TEXT NOT NULL,
    vals          BLOB NOT NULL,
    measured      TEXT NOT NULL DEFAULT 'null'
);
CREATE TABLE journal (
    id     INTEGER PRIMARY KEY,
    time   TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT 'null'
);
CREATE TABLE result_basis (
    variant TEXT PRIMARY KEY NOT NULL,
    basis   TEXT NOT NULL
);
)sql";

struct Migration {
    int from;
    const char* sql;
};

const Migration kMigrations[] = {
    {1, kMigrate1To2},
    {2, kMigrate2To3},
};

} // namespace

const char* ddlV1() { return kDdlV1; }
const char* ddlCurrent() { return kDdlCurrent; }

Database::Database(const std::string& file, int flags, const std::string& shownAs) : mFile(shownAs.empty() ? file : shownAs) {
    const int rc = sqlite3_open_v2(file.c_str(), &mDb, flags, nullptr);
    if (rc != SQLITE_OK) fail(rc, "opening it");
    sqlite3_busy_timeout(mDb, 5000);
    exec("PRAGMA foreign_keys = ON", "setting up");
}

Database::~Database() { sqlite3_close_v2(mDb); }

void Database::exec(const char* sql, const char* doing) {
    const int rc = sqlite3_exec(mDb, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) fail(rc, doing);
}

void Database::fail(int rc, const std::string& doing) const {
    const int primary = rc & 0xff;
    const std::string message = mDb ? sqlite3_errmsg(mDb) : sqlite3_errstr(rc);
    if (primary == SQLITE_NOTADB) throw Error(mFile, "is not a cwb project (not an SQLite database)");
    if (primary == SQLITE_CORRUPT) throw Error(mFile, "is damaged or truncated (" + message + ")");
    throw Error(mFile, "SQLite error while " + doing + ": " + message);
}

Statement::Statement(Database& db, const char* sql) : mDb(db) {
    const int rc = sqlite3_prepare_v2(db.handle(), sql, -1, &mStmt, nullptr);
    if (rc != SQLITE_OK) db.fail(rc, "preparing a statement");
}

Statement::~Statement() { sqlite3_finalize(mStmt); }

Statement& Statement::bind(int i, const std::string& v) {
    return check(sqlite3_bind_text(mStmt, i, v.data(), int(v.size()), SQLITE_TRANSIENT));
}

Statement& Statement::bind(int i, int64_t v) { return check(sqlite3_bind_int64(mStmt, i, v)); }

Statement& Statement::bind(int i, double v) {
    return check(std::isnan(v) ? sqlite3_bind_null(mStmt, i) : sqlite3_bind_double(mStmt, i, v));
}

Statement& Statement::bindBlob(int i, const std::string& bytes) {
    return check(sqlite3_bind_blob(mStmt, i, bytes.data(), int(bytes.size()), SQLITE_TRANSIENT));
}

Statement& Statement::check(int rc) {
    if (rc != SQLITE_OK) mDb.fail(rc, "binding a value");
    return *this;
}

bool Statement::step() {
    const int rc = sqlite3_step(mStmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    mDb.fail(rc, "reading or writing");
}

void Statement::run() {
    step();
    sqlite3_reset(mStmt);
    sqlite3_clear_bindings(mStmt);
}

std::string Statement::text(int c) const {
    const unsigned char* t = sqlite3_column_text(mStmt, c);
    return t ? std::string(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(mStmt, c))) : "";
}

int64_t Statement::integer(int c) const { return sqlite3_column_int64(mStmt, c); }

double Statement::real(int c) const {
    return sqlite3_column_type(mStmt, c) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(mStmt, c);
}

std::string Statement::blob(int c) const {
    const void* b = sqlite3_column_blob(mStmt, c);
    return b ? std::string(static_cast<const char*>(b), size_t(sqlite3_column_bytes(mStmt, c))) : "";
}

nlohmann::json Statement::jsonValue(int c, const std::string& what) const {
    try {
        return nlohmann::json::parse(text(c));
    } catch (const nlohmann::json::exception&) {
        throw Error(mDb.file(), "is damaged: " + what + " is not valid JSON");
    }
}

void inTransaction(Database& db, const char* begin, const std::function<void()>& body) {
    db.exec(begin, "starting a transaction");
    try {
        body();
        db.exec("COMMIT", "committing");
    } catch (...) {
        sqlite3_exec(db.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

void useRollbackJournal(Database& db) {
    db.exec("PRAGMA journal_mode = DELETE", "switching to a rollback journal");
    db.exec("PRAGMA synchronous = FULL", "setting up");
}

int readVersion(Database& db) {
    Statement hasMeta(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
    hasMeta.step();
    if (hasMeta.integer(0) == 0) throw Error(db.file(), "is not a cwb project (no meta table)");
    Statement version(db, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (!version.step()) throw Error(db.file(), "is not a cwb project (no schema version)");
    const std::string text = version.text(0);
    try {
        size_t used = 0;
        const int v = std::stoi(text, &used);
        if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
    throw Error(db.file(), "is damaged: schema version '" + text + "' is not a number");
}

void checkReadable(int version, const std::string& file) {
    const std::string range = "this build reads schema " + std::to_string(kOldestVersion) + " to " +
                              std::to_string(kCurrentVersion);
    if (version > kCurrentVersion)
        throw Error(file, "written by a newer cwb (schema " + std::to_string(version) + "); " + range);
    if (version < kOldestVersion)
        throw Error(file, "has schema " + std::to_string(version) + ", which is too old; " + range);
}

void migrate(Database& db, int fromVersion) {
    const std::string& file = db.file();
    if (fromVersion < kOldestVersion || fromVersion > kCurrentVersion)
        throw Error(file, "cannot migrate from schema " + std::to_string(fromVersion));
    for (int version = fromVersion; version < kCurrentVersion; ++version) {
        const char* sql = nullptr;
        for (const Migration& m : kMigrations)
            if (m.from == version) sql = m.sql;
        if (!sql) throw Error(file, "no migration from schema " + std::to_string(version));
        char* message = nullptr;
        if (sqlite3_exec(db.handle(), sql, nullptr, nullptr, &message) != SQLITE_OK) {
            const std::string text = message ? message : sqlite3_errmsg(db.handle());
            sqlite3_free(message);
            throw Error(file, "migration from schema " + std::to_string(version) + " to " +
                                  std::to_string(version + 1) + " failed: " + text);
        }
    }
}

} // namespace cwb::project_schema
