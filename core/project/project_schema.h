#pragma once
// The layout of a .cwbproj file (one SQLite database), the migrations between its versions, and the thin
// SQLite layer project.cpp reads and writes through (one connection, prepared statements with bound values,
// errors that name the file).
//
// The schema version lives in the `meta` table, row key 'schema_version' (decimal text), not in
// PRAGMA user_version: the same table carries the writer's versions, so one read tells "is this a cwb
// project" (the table and the row exist) and "which layout". PRAGMA application_id is also set to
// kApplicationId so `file` and other tools can recognise the file, but cwb does not rely on it.
//
// History:
//   1: meta, model, settings, variants, results (no device/threads columns).
//   2: results gains device and threads; new tables importance and journal.
//   3: new table result_basis: per variant, what its results were measured from (recipes, model, tokenizer,
//      data and windows; Project::measurementBasis), so a later change marks them out of date; importance gains
//      `measured` (the text, windows and device a map was measured with).
//
// Conventions: JSON values (recipes, exports, journal details, labels) are stored as text; REAL NULL
// stands for NaN (SQLite cannot store NaN); importance values are a BLOB of little-endian doubles so
// NaN/Inf survive; 64-bit unsigned numbers are stored bit-cast to INTEGER.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

struct sqlite3;
struct sqlite3_stmt;

namespace cwb::project_schema {

constexpr int kCurrentVersion = 3;
constexpr int kOldestVersion = 1;
constexpr int kApplicationId = 0x43574250;   // "CWBP"

// Complete DDL of each layout, including the meta row that states its version. Executing one of these
// in an empty database gives a valid, empty project of that version (no model/settings rows yet).
const char* ddlV1();
const char* ddlCurrent();

// One connection, closed on scope exit; busy timeout 5 s, foreign keys on. Failures throw cwb::Error naming
// the file: "is not a cwb project (not an SQLite database)", "is damaged or truncated (...)", or
// "SQLite error while <doing>: ...".
class Database {
public:
    // `shownAs`: the name messages give (the path, when `file` is an SQLite URI); empty: `file`.
    Database(const std::string& file, int sqliteOpenFlags, const std::string& shownAs = "");
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    sqlite3* handle() const { return mDb; }
    const std::string& file() const { return mFile; }
    void exec(const char* sql, const char* doing);   // constant SQL only: never splice values into it
    [[noreturn]] void fail(int rc, const std::string& doing) const;

private:
    std::string mFile;
    sqlite3* mDb = nullptr;
};

// A prepared statement; values are always bound. NaN doubles are stored as NULL and read back as NaN.
class Statement {
public:
    Statement(Database& db, const char* sql);
    ~Statement();
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int i, const std::string& v);
    Statement& bind(int i, int64_t v);
    Statement& bind(int i, double v);
    Statement& bindUnsigned(int i, uint64_t v) { return bind(i, static_cast<int64_t>(v)); }   // bit-cast
    Statement& bindBlob(int i, const std::string& bytes);
    Statement& bindJson(int i, const nlohmann::json& v) { return bind(i, v.dump()); }

    bool step();   // true: a row is ready; false: done
    void run();    // step, then reset and clear the bindings for the next row

    std::string text(int column) const;
    int64_t integer(int column) const;
    uint64_t unsignedInteger(int column) const { return static_cast<uint64_t>(integer(column)); }
    double real(int column) const;
    std::string blob(int column) const;
    nlohmann::json jsonValue(int column, const std::string& what) const;   // "is damaged: <what> ..." on bad JSON

private:
    Statement& check(int rc);
    Database& mDb;
    sqlite3_stmt* mStmt = nullptr;
};

// Runs `body` between `begin` ("BEGIN" or "BEGIN IMMEDIATE") and COMMIT; rolls back and rethrows on failure.
void inTransaction(Database& db, const char* begin, const std::function<void()>& body);

// journal_mode=DELETE (SQLite's rollback journal) and synchronous=FULL: a save that dies half way leaves a hot
// journal, which the next writer rolls back, so the file holds the old state or the new one; FULL makes a finished
// save survive a power cut (saves are rare, the extra fsync is cheap). Not WAL: a WAL reader creates -wal and -shm
// files beside the project, so a colleague who only read it left files the owner could not write (locking them out
// of saving), and a project on read-only media could not be read at all. A project a WAL build wrote is switched
// over when it is next written.
void useRollbackJournal(Database& db);

// The meta table's schema_version. Throws "is not a cwb project (no meta table)" / "(no schema version)".
int readVersion(Database& db);
// Throws "written by a newer cwb (schema N); this build reads schema 1 to 2" and the like.
void checkReadable(int version, const std::string& file);

// Brings the database from `fromVersion` to kCurrentVersion. Runs inside the caller's transaction and
// throws cwb::Error naming the file when a step fails or `fromVersion` is unknown.
void migrate(Database& db, int fromVersion);

} // namespace cwb::project_schema
