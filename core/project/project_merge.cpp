// Project::merge: the three-way merge a save refused with ChangedOnDisk offers (see project.h).
#include "core/project/project.h"

#include <algorithm>
#include <initializer_list>
#include <optional>

namespace cwb {

using nlohmann::json;

namespace {

// The part as the side that changed it has it (null: absent there); both changed it, differently: `conflict`.
// Parts are compared whole.
template <typename T>
const T* mergedPart(const T* base, const T* mine, const T* theirs, bool* conflict) {
    auto same = [](const T* a, const T* b) { return a == b || (a && b && *a == *b); };
    if (same(mine, base)) return theirs;
    if (same(theirs, base) || same(mine, theirs)) return mine;
    *conflict = true;
    return mine;
}

struct Measured {   // a variant's results with their basis: merged as one part
    std::vector<ResultRow> rows;
    json basis;
    bool operator==(const Measured& o) const { return rows == o.rows && basis == o.basis; }
};

} // namespace

bool Project::merge(const Project& base, Project& mine, const Project& theirs, std::vector<std::string>* conflicts) {
    std::vector<std::string> found;
    Project merged = mine;
    bool clash = false;
    merged.mModel = *mergedPart(&base.mModel, &mine.mModel, &theirs.mModel, &clash);
    if (clash) found.push_back("the model or its tokenizer");
    clash = false;
    merged.mSettings = *mergedPart(&base.mSettings, &mine.mSettings, &theirs.mSettings, &clash);
    if (clash) found.push_back("the calibration and evaluation settings");

    // Variants by name: theirs' order first, then the ones only this side has, in its order.
    auto find = [](const Project& p, const std::string& name) -> const Variant* {
        for (const Variant& v : p.mVariants)
            if (v.name == name) return &v;
        return nullptr;
    };
    std::vector<std::string> names;
    for (const Project* p : std::initializer_list<const Project*>{&theirs, &mine, &base})
        for (const Variant& v : p->mVariants)
            if (std::find(names.begin(), names.end(), v.name) == names.end()) names.push_back(v.name);
    merged.mVariants.clear();
    std::vector<std::string> kept;
    for (const std::string& name : names) {
        clash = false;
        const Variant* v = mergedPart(find(base, name), find(mine, name), find(theirs, name), &clash);
        if (clash) found.push_back("variant '" + name + "' (changed or removed on both sides)");
        if (v) {
            merged.mVariants.push_back(*v);
            kept.push_back(name);
        }
    }
    // Parents before children, as addVariant keeps them.
    std::vector<Variant> ordered;
    while (ordered.size() < merged.mVariants.size()) {
        bool progressed = false;
        for (const Variant& v : merged.mVariants) {
            const bool placed = std::any_of(ordered.begin(), ordered.end(), [&](const Variant& o) { return o.name == v.name; });
            const bool parentPlaced = v.parent.empty() ||
                                      std::any_of(ordered.begin(), ordered.end(), [&](const Variant& o) { return o.name == v.parent; });
            if (!placed && parentPlaced) {
                ordered.push_back(v);
                progressed = true;
            }
        }
        if (!progressed) {
            for (const Variant& v : merged.mVariants)
                if (std::none_of(ordered.begin(), ordered.end(), [&](const Variant& o) { return o.name == v.name; }))
                    found.push_back("variant '" + v.name + "' derives from '" + v.parent + "', which the other side removed");
            break;
        }
    }
    merged.mVariants = ordered;

    // Results (with their basis) per variant, importance maps by kind.
    auto measured = [](const Project& p, const std::string& name) -> std::optional<Measured> {
        std::vector<ResultRow> rows = p.results(name);
        if (rows.empty()) return std::nullopt;
        return Measured{std::move(rows), p.resultBasis(name)};
    };
    merged.mResults.clear();
    merged.mResultBasis.clear();
    // Results that change on one side of a variant the other removed (or renamed) would be lost without a word.
    for (const std::string& name : names) {
        if (std::find(kept.begin(), kept.end(), name) != kept.end()) continue;
        const std::optional<Measured> b = measured(base, name), m = measured(mine, name), t = measured(theirs, name);
        if ((m && !(b && *m == *b)) || (t && !(b && *t == *b)))
            found.push_back("the results of '" + name + "' (measured on one side; the variant was removed or renamed on the other)");
    }
    kept.insert(kept.begin(), kBaseName);
    for (const std::string& name : kept) {
        const std::optional<Measured> b = measured(base, name), m = measured(mine, name), t = measured(theirs, name);
        clash = false;
        const Measured* r = mergedPart(b ? &*b : nullptr, m ? &*m : nullptr, t ? &*t : nullptr, &clash);
        if (clash) found.push_back("the results of '" + name + "' (measured on both sides)");
        if (!r) continue;
        for (ResultRow row : r->rows) merged.mResults.push_back(std::move(row));
        if (!r->basis.is_null()) merged.mResultBasis[name] = r->basis;
    }
    std::vector<std::string> kinds;
    for (const Project* p : std::initializer_list<const Project*>{&theirs, &mine, &base})
        for (const ImportanceMap& m : p->mImportance)
            if (std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end()) kinds.push_back(m.kind);
    merged.mImportance.clear();
    for (const std::string& kind : kinds) {
        clash = false;
        const ImportanceMap* m = mergedPart(base.importance(kind), mine.importance(kind), theirs.importance(kind), &clash);
        if (clash) found.push_back("importance map '" + kind + "' (measured on both sides)");
        if (m) merged.mImportance.push_back(*m);
    }
    std::sort(merged.mImportance.begin(), merged.mImportance.end(),
              [](const ImportanceMap& a, const ImportanceMap& b) { return a.kind < b.kind; });

    // The journal: the file's, then what this side did since it last read or saved it.
    merged.mJournal = theirs.mJournal;
    for (size_t i = base.mJournal.size(); i < mine.mJournal.size(); ++i) merged.mJournal.push_back(mine.mJournal[i]);

    if (found.empty()) {
        try {
            merged.checkLineage();
        } catch (const Error& e) {
            found.push_back(e.what());
        }
        std::vector<std::string> all;
        for (const Variant& v : merged.mVariants) all.push_back(v.name);
        const std::string clash = merged.exportClashes(all);
        if (!clash.empty()) found.push_back("exports: " + clash);
    }
    if (conflicts) *conflicts = found;
    if (!found.empty()) return false;
    merged.mRevision = theirs.mRevision;
    merged.mWrittenBy = theirs.mWrittenBy;
    merged.mPath = mine.mPath;
    merged.mReadOnly = mine.mReadOnly;
    merged.mModified = true;
    mine = std::move(merged);
    return true;
}

} // namespace cwb
