#pragma once
// A project (.cwbproj): the base model, calibration/evaluation settings, a tree of variants (each a
// recipe applied to the base model or to another variant), their measured results, importance maps and
// a journal of what was done. The file is one SQLite database (layout in project_schema.h).
//
// A Project is plain data in memory: open() reads the whole file and closes it; the mutators change
// only memory; save() rewrites every table in ONE transaction (rollback journal, synchronous=FULL), so a
// crash or kill during save leaves the previous saved state readable. Nothing here keeps the database
// open, so a Project can be copied freely. Each save counts a revision: a save over a file another program saved
// since this object read it is refused (ChangedOnDisk) rather than dropping that program's changes.
// Every failure is a cwb::Error naming the file.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/model_format.h"
#include "core/util/error.h"

namespace cwb {

struct FileReference {
    std::string path;
    std::string hash;             // file_hash.h form ("fnv1a64:..."), "" when not computed
    uint64_t bytes = 0;
    bool operator==(const FileReference& o) const { return path == o.path && hash == o.hash && bytes == o.bytes; }
};

// A reference to the calibration or evaluation text at `path` (made absolute), hashed as it is now. Throws cwb::Error
// naming the path for a folder, a missing or unreadable file, and a text that is empty or only white space (it would
// fail every run that reads it).
FileReference textFileReference(const std::string& path);

struct ModelReference {
    std::string path;
    std::string format;           // gguf | hf | llama2c
    uint64_t bytes = 0;
    std::string hash;
    // A tokenizer used in place of the model's own (LoadOptions::tokenizerPath), "" for none. Kept in the meta table
    // (key model_tokenizer), so builds that predate it still open the project.
    std::string tokenizer;
    // hashTokenizer of that tokenizer when it was recorded (meta key model_tokenizer_hash), "" when none or not computed.
    std::string tokenizerHash;
    bool operator==(const ModelReference& o) const;
    // What loadModel needs to read the model as the project does.
    LoadOptions loadOptions() const;
};

// Fingerprint of the tokenizer a path names: hashFiles of tokenizerFiles(path), the tokenizer file labelled
// "tokenizer" whatever its name and the files beside it by name, so a folder and its tokenizer.json, or the same files
// moved or the tokenizer file renamed, give one hash. Throws cwb::Error naming the path when it is not a tokenizer.
std::string hashTokenizer(const std::string& path);

// What a replay of a project should say of the tokenizer `loaded` was read with against what the project recorded; ""
// when they agree, or when the project recorded no hash to compare with. `given`: the path given in place of the
// model's own (the project's, or one passed instead), "" for the model's own, whose file, where the loader found one
// beside the model (a llama2.c checkpoint's tokenizer.bin), is checked too. `usedHash` (may be null) gets the hash of
// the file used ("" when none). Throws cwb::Error naming the path when it is not a tokenizer.
std::string tokenizerChangeWarning(const ModelReference& recorded, const std::string& given, const Model& loaded,
                                   std::string* usedHash = nullptr);

// The hash a new project records for `model` read with `given` ("" for its own tokenizer): that of the given tokenizer,
// or of the tokenizer file the loader found beside the model (a llama2.c checkpoint's), else "".
std::string tokenizerHashToRecord(const Model& model, const std::string& given);

struct ProjectSettings {
    FileReference calibration;
    int64_t calibrationSamples = 128;
    int64_t calibrationSeqLen = 512;
    uint64_t calibrationSeed = 0;
    FileReference evaluation;
    int64_t evalCtx = 512;
    int64_t evalChunks = -1;      // -1: all chunks
    bool operator==(const ProjectSettings& o) const;
};

// The bounds `cwb project create`/`set`, the GUI's settings dialog and a project's run hold the settings to. Window and
// chunk sizes in tokens are also at most the model's context where it is known; eval_chunks is -1 (every chunk) or at
// least 1.
constexpr int64_t kLeastCalibrationSamples = 1;
constexpr int64_t kMostCalibrationSamples = 1000000;
constexpr int64_t kLeastCalibrationSeqLen = 2;
constexpr int64_t kLeastEvalCtx = 4;
// Throws cwb::Error naming `projectPath`, the setting as stored and the `cwb project set` option that replaces it, for
// the first setting outside those bounds (a file edited by other means): a run names it instead of failing later in an
// evaluation or a calibration whose error names neither.
void checkStoredSettings(const ProjectSettings& s, const std::string& projectPath);

// The text importance maps and the budget solver measure on: the calibration text, else the evaluation text.
const FileReference& measurementText(const ProjectSettings& s);
// Where importance and the budget measure on the evaluation text (no calibration text, or the same text): a warning
// (layers chosen from what is measured on it are fitted to the text perplexity is measured on); else "".
std::string evaluationStandInWarning(const ProjectSettings& s);

// The calibration and evaluation texts' hashes as the files are now. Results are stamped with what they were measured
// on, and a text edited in place keeps the hash the project recorded. A text not there, unreadable, or with no
// recorded hash keeps the recorded one.
struct TextHashes {
    std::string evaluation, calibration;
};
TextHashes textHashesOnDisk(const ProjectSettings& settings);
// A Project::measurementBasis with `texts` in place of the recorded hashes.
nlohmann::json withTextHashes(nlohmann::json basis, const TextHashes& texts);

struct Variant {
    std::string name;             // unique; "base" is reserved for the base model
    std::string parent;           // "" = the base model, else another variant's name
    nlohmann::json recipe = {{"steps", nlohmann::json::array()}};   // Recipe::toJson() form
    std::string created;          // UTC ISO 8601; addVariant stamps it when empty
    nlohmann::json exports = nlohmann::json::array();
    bool operator==(const Variant& o) const;
};

// Why `exports` is not a list of export requests a variant can keep ("" when it is): each an object with a
// string "format", a "file" that is a plain file or folder name (the export lands in the batch's --out folder, so
// no path separators, no "." or "..") and an optional string "type", string "requantize" and boolean "pack_head"
// (ExportOptions::packHead). Checked when a project is read and when one
// is set, so a hostile project file cannot make --batch write elsewhere.
std::string exportEntriesProblem(const nlohmann::json& exports);

struct ResultRow {
    std::string variant;          // "base" for the base model
    std::string metric;
    double value = 0;
    double error = 0;
    std::string device;
    int threads = 0;
    double seconds = 0;
    std::string time;
    std::string build;
    bool operator==(const ResultRow& o) const;
};

struct ImportanceMap {
    std::string kind;
    std::vector<std::string> rowLabels, columnLabels;
    std::vector<double> values;   // rows x columns, row-major
    // What it was measured on (null: not recorded, maps from before schema 3): importanceMeasurement() in
    // core/analysis/importance.h, e.g. {"text": path, "text_hash", "windows", "tokens", "seed", "device"}.
    nlohmann::json measuredWith;
    bool operator==(const ImportanceMap& o) const;
};

struct JournalEntry {
    std::string time;             // UTC ISO 8601
    std::string action;
    nlohmann::json detail;
    bool operator==(const JournalEntry& o) const;
};

struct WrittenBy {
    std::string app, torch, cuda;
    int schema = 0;
    bool operator==(const WrittenBy& o) const;
};

// Project::save found the file saved by another program since this one read it.
class ChangedOnDisk : public Error {
public:
    using Error::Error;
};

class Project {
public:
    static constexpr const char* kBaseName = "base";

    // Writes a new project file; refuses a path that already exists.
    static Project create(const std::string& path, const ModelReference& model, const ProjectSettings& settings);
    // Reads a project. An older schema is migrated in place inside one transaction (and the migration is
    // journaled); a newer schema, a non-SQLite file, or an SQLite file that is not a project is refused.
    // ReadOnly (commands that only read: show, --batch, export, bench) writes nothing beside the file, and save()
    // refuses; a file or folder this process cannot write is opened so too, whatever `access` says.
    enum class Access { ReadWrite, ReadOnly };
    static Project open(const std::string& path, Access access = Access::ReadWrite);
    // Writes the whole in-memory state in one transaction and stamps writtenBy() with the writer set by
    // setWriter() and the current schema.
    void save();

    // Autosave: the whole state goes to autosavePath(path()) — itself a complete project file, written to a
    // temporary file and renamed — and the real project is left as the user last saved it. save() leaves it (it may be another
    // process's unsaved work); the GUI drops its own when it saves.
    static std::string autosavePath(const std::string& path);   // path + ".autosave"
    void autosave() const;
    // The file as the autosaving editor last read or saved it, beside the autosave (path + ".autosave.base"), so that
    // a recovered state can still be merged with what another program saved into the file since (Project::merge).
    static std::string autosaveBasePath(const std::string& path);
    void autosaveBase(const Project& lastSaved) const;   // writes lastSaved there (temporary file + rename)
    // That base, when it was written for this autosave (the same file revision); null when absent (an autosave of an
    // older build, or of an untitled project) or of another revision. Opened read-only.
    static std::unique_ptr<Project> recoverAutosaveBase(const std::string& path);
    // The whole state, journal included, as a complete project file at `target` (temporary file + rename; an
    // existing file there is replaced): Save As, and the autosave. path() stays as it is.
    void writeCopy(const std::string& target) const;
    static bool hasAutosave(const std::string& path);
    // The autosaved state of `path`, ready to continue editing: path() is `path` and it counts as modified, so the
    // next save() writes the real project (refused if the file was saved after the autosave was read).
    // The autosave itself (and its base) stays until discardAutosave.
    static Project recoverAutosave(const std::string& path);
    static void discardAutosave(const std::string& path);

    // Process-wide identity stamped on every save (the app wires cwb::versionString() etc. at startup;
    // this module stays free of LibTorch). Until called: app "cwb (unknown version)", torch/cuda "".
    static void setWriter(const std::string& app, const std::string& torch, const std::string& cuda);

    const std::string& path() const { return mPath; }
    const ModelReference& model() const { return mModel; }
    const ProjectSettings& settings() const { return mSettings; }
    const std::vector<Variant>& variants() const { return mVariants; }   // in insertion order; parents first
    const std::vector<ResultRow>& results() const { return mResults; }
    std::vector<ResultRow> results(const std::string& variant) const;
    const std::vector<ImportanceMap>& importance() const { return mImportance; }   // sorted by kind
    const ImportanceMap* importance(const std::string& kind) const;                // nullptr when absent
    const std::vector<JournalEntry>& journal() const { return mJournal; }
    const WrittenBy& writtenBy() const { return mWrittenBy; }   // as of the last open or save
    bool isModified() const { return mModified; }               // changed since the last open/create/save

    void setModel(const ModelReference& model);
    void setSettings(const ProjectSettings& settings);

    // Refuses an empty or reserved name, a duplicate, an unknown parent, a parent cycle, and a recipe that
    // is not an object with a "steps" array (an empty array is fine).
    void addVariant(Variant variant);
    // Refuses an unknown name and a variant another derives from; drops the variant's results.
    void removeVariant(const std::string& name);
    // Renames a variant; variants derived from it follow and its results move with it. Refuses an unknown `from`
    // and, for `to`, what addVariant refuses (empty, reserved, taken).
    void renameVariant(const std::string& from, const std::string& to);
    void setRecipe(const std::string& name, nlohmann::json recipe);
    // Refuses what exportEntriesProblem refuses and a file name another entry (of this or any variant) writes: --batch
    // writes every export into one folder, so the later would replace the earlier.
    void setExports(const std::string& name, nlohmann::json exports);
    // Why the exports of `variants` cannot all be written into one folder ("" when they can): two entries naming one
    // file. Projects from before setExports checked this may hold such entries; --batch asks before any work.
    std::string exportClashes(const std::vector<std::string>& variants) const;
    bool hasVariant(const std::string& name) const;
    // Why `name` should not be given to a new variant ("" when it may): a comma (it separates names in --variants
    // lists), a control character, or a space at either end. Asked where a user names one (CLI, GUI); addVariant does
    // not ask, so projects holding such names from older builds still open, undo and copy.
    static std::string newNameProblem(const std::string& name);
    const Variant& variant(const std::string& name) const;    // throws for an unknown name
    // The variants from the base model down to `name`, base-first: for base -> a -> b, lineage("b") is
    // {"a", "b"} (the base model itself is implied, not listed); lineage("base") is {}. Applying their
    // recipes in this order rebuilds `name`. Throws for an unknown name.
    std::vector<std::string> lineage(const std::string& name) const;

    // Replaces every row of `variant` ("base" or a variant's name); each row's variant field is set to it. `basis` is
    // what they were measured from (measurementBasis()), kept with them so that a later change of recipe, model,
    // tokenizer or settings marks them out of date; null: not known.
    void setResults(const std::string& variant, std::vector<ResultRow> rows, nlohmann::json basis = nullptr);
    // The basis stored with the results of `variant`; null when it has none or none was recorded (results measured
    // by a build before schema 3).
    const nlohmann::json& resultBasis(const std::string& variant) const;
    // What results of `variant` measured now depend on: the steps of the recipes along its lineage (not their
    // descriptions), the model's and the tokenizer's hashes, the evaluation text and windows, and for variants the
    // calibration text and windows (calibrated steps and the per-layer reconstruction errors draw on them). Paths are
    // left out, so moving a file changes nothing. `modelHash`/`tokenizerHash`: of what a run actually used, where it
    // was not the project's own (cwb project run --model/--tokenizer).
    nlohmann::json measurementBasis(const std::string& variant) const;
    nlohmann::json measurementBasis(const std::string& variant, const std::string& modelHash,
                                    const std::string& tokenizerHash) const;
    // Why the stored results of `variant` are not what measuring it now would give: one phrase per part of the basis
    // that differs ("its recipe changed", ...). Empty when they are current, when there are none, and when no basis
    // was recorded with them.
    std::vector<std::string> resultsOutdatedBy(const std::string& variant) const;
    // The phrases of resultsOutdatedBy for two bases.
    static std::vector<std::string> basisDifferences(const nlohmann::json& measured, const nlohmann::json& now);
    // Replaces the map of the same kind; refuses values.size() != rows x columns and an empty kind.
    void setImportance(ImportanceMap map);
    void removeImportance(const std::string& kind);
    // Appends to the journal, stamped with the current UTC time.
    void record(const std::string& action, const nlohmann::json& detail = nullptr);

    // For a save refused with ChangedOnDisk: merges `theirs` (the file as it is now) into `mine` (this program's
    // state), given `base` (the file as this program last read or saved it). Each part (the model reference, the
    // settings, each variant by name, each variant's results with their basis, each importance map by kind) takes
    // the side that changed it; the journal keeps the new entries of both. A part both sides changed, differently, is
    // a conflict: returns false, names each in `conflicts`, and leaves `mine` as it was. Merged, `mine` counts as
    // modified and its next save goes over the file (unless it changes again meanwhile).
    static bool merge(const Project& base, Project& mine, const Project& theirs, std::vector<std::string>* conflicts);

    bool operator==(const Project& o) const;   // content: everything above except path() and isModified()
    bool operator!=(const Project& o) const { return !(*this == o); }
    nlohmann::json toJson() const;             // for `cwb project show --json`

    static std::string currentTime();          // "YYYY-MM-DDTHH:MM:SSZ"

private:
    Project() = default;
    void checkLineage() const;                  // parents exist and form no cycle (damaged files)
    Variant& findVariant(const std::string& name);

    bool mReadOnly = false;
    int64_t mRevision = 0;   // the file's save count when read (or last saved) by this object
    std::string mPath;
    ModelReference mModel;
    ProjectSettings mSettings;
    std::vector<Variant> mVariants;
    std::vector<ResultRow> mResults;
    std::map<std::string, nlohmann::json> mResultBasis;   // variant -> basis of its results (only where known)
    std::vector<ImportanceMap> mImportance;
    std::vector<JournalEntry> mJournal;
    WrittenBy mWrittenBy;
    bool mModified = false;

    friend class ProjectReader;
    friend class ProjectWriter;
};

} // namespace cwb
