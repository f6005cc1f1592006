// Structured pruning: attention heads (GQA-aware), MLP channels and whole blocks. These change shapes, so the
// variant records per-layer sizes in ArchSpec::layerShapes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/compress/method.h"
#include "core/compress/methods/calibration_stats.h"
#include "core/compress/sequential.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace cwb {

namespace {

// Rows (dim 0) or columns (dim 1) `keep` of a tensor, as a replacement with the layer's storage precision.
void keepSlices(Model& model, const std::string& name, int64_t dim, const std::vector<int64_t>& keep) {
    if (!model.has(name)) return;
    const TensorRecord& r = model.tensor(name);
    at::ScalarType type = r.type == ggml::Type::F16 ? at::kHalf : r.type == ggml::Type::BF16 ? at::kBFloat16 : at::kFloat;
    at::Tensor index = at::tensor(keep, at::kLong);
    model.replaceTensor(name, model.floatTensor(name).index_select(dim, index).to(type));
}

std::vector<int64_t> headRows(const std::vector<int64_t>& heads, int64_t headDim) {
    std::vector<int64_t> rows;
    for (int64_t h : heads)
        for (int64_t i = 0; i < headDim; ++i) rows.push_back(h * headDim + i);
    return rows;
}

std::vector<int64_t> parseIntList(const std::string& text, const std::string& what) {
    std::vector<int64_t> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        if (item.empty()) continue;
        try {
            out.push_back(std::stoll(item));
        } catch (...) {
            throw Error(what + ": '" + item + "' is not an integer");
        }
    }
    return out;
}

// The query heads an explicit 'layer:head,...' list removes, per block; throws cwb::Error for an item that is not
// 'layer:head', a head or block the model does not have, or a block left with kv groups of different sizes or none.
std::map<int64_t, std::set<int64_t>> explicitHeadRemoval(const std::string& list, const ArchSpec& spec) {
    std::map<int64_t, std::set<int64_t>> remove;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
        if (item.empty()) continue;
        const size_t colon = item.find(':');
        if (colon == std::string::npos) throw Error("prune.heads: '" + item + "' is not 'layer:head'");
        const std::vector<int64_t> layer = parseIntList(item.substr(0, colon), "prune.heads"),
                                   head = parseIntList(item.substr(colon + 1), "prune.heads");
        if (layer.size() != 1 || head.size() != 1) throw Error("prune.heads: '" + item + "' is not 'layer:head'");
        const int64_t l = layer.front(), h = head.front();
        if (l < 0 || l >= spec.layers)
            throw Error("prune.heads: no head " + item + " in this model (blocks 0.." + std::to_string(spec.layers - 1) + ")");
        if (h < 0 || h >= spec.headsAt(l))
            throw Error("prune.heads: no head " + item + " in this model (block " + std::to_string(l) + " has query heads 0.." +
                        std::to_string(spec.headsAt(l) - 1) + ")");
        remove[l].insert(h);
    }
    for (const auto& [l, heads] : remove) {
        const int64_t H = spec.headsAt(l), G = spec.kvHeadsAt(l), group = H / G;
        if (int64_t(heads.size()) == H) throw Error("prune.heads: layer " + std::to_string(l) + " would lose every head");
        std::vector<int64_t> perGroup(size_t(G), 0);
        for (int64_t h : heads) ++perGroup[size_t(h / group)];
        int64_t kept = -1;
        for (int64_t n : perGroup) {
            if (n == group) continue;   // the whole kv group goes
            if (kept >= 0 && n != kept)
                throw Error("prune.heads: layer " + std::to_string(l) + " would keep kv groups of different sizes; "
                            "remove the same number of query heads from every group (or whole groups)");
            kept = n;
        }
    }
    return remove;
}

void requireLlama(const StepContext& ctx) {
    if (ctx.model.spec.family != Family::Llama)
        throw Error(ctx.step.method + ": supports the Llama family only (GPT-2's fused attention is not handled yet)");
}

// Sorted indices of the `count` smallest scores.
std::vector<int64_t> lowest(const std::vector<double>& scores, int64_t count) {
    std::vector<int64_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
    order.resize(static_cast<size_t>(count));
    std::sort(order.begin(), order.end());
    return order;
}

class HeadPruning : public CompressionMethod {
public:
    std::string id() const override { return "prune.heads"; }
    bool actsPerLinearLayer() const override { return false; }
    std::string blockSelector(Family) const override { return "self_attn.q_proj"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "Attention head pruning"; }
    std::string summary() const override { return "removes attention heads; GQA-aware (query heads evenly within kv groups, or whole kv groups)"; }
    std::vector<ParamSpec> params() const override {
        return {floatParam("ratio", 0.0, 0.9, 0.25, "fraction of heads removed in each targeted layer"),
                choiceParam("unit", {"query", "kv_group"}, "query", "query: the same number of query heads from every kv group; kv_group: whole groups"),
                choiceParam("importance", {"activation", "weight"}, "activation", "activation: mean norm of each head's contribution on calibration data; weight: ‖Wq‖·‖Wo‖"),
                textParam("heads", "", "explicit query heads to remove, 'layer:head,...' (overrides ratio and importance)")};
    }
    bool needsCalibration(const nlohmann::json& p) const override {
        return p["heads"].get<std::string>().empty() && p["importance"] == "activation";
    }
    std::string modelProblem(const Model& model, const nlohmann::json& p) const override {
        if (model.spec.family != Family::Llama)
            return "prune.heads: supports the Llama family only (GPT-2's fused attention is not handled yet)";
        try {
            explicitHeadRemoval(p["heads"], model.spec);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    void apply(StepContext& ctx) const override {
        requireLlama(ctx);
        Model& m = ctx.model;
        std::set<int64_t> targeted;
        for (const auto& layer : ctx.layers)
            if (layer.find(blockSelector(m.spec.family)) != std::string::npos) targeted.insert(blockOf(layer));

        std::map<int64_t, std::set<int64_t>> removeQuery;   // per block: query heads to remove
        const std::string explicitList = ctx.params["heads"];
        if (!explicitList.empty()) {
            removeQuery = explicitHeadRemoval(explicitList, m.spec);
        } else {
            std::vector<std::vector<double>> importance = scores(ctx, targeted);
            for (int64_t l : targeted) {
                const int64_t H = m.spec.headsAt(l), G = m.spec.kvHeadsAt(l), group = H / G;
                const std::vector<double>& s = importance[static_cast<size_t>(l)];
                // Per-layer ratios come from the step's overrides, matched against the block's q_proj.
                const double ratio = ctx.paramsFor(names::llamaLayer(l, blockSelector(m.spec.family)))["ratio"].get<double>();
                if (ctx.params["unit"] == "kv_group") {
                    std::vector<double> groupScore(static_cast<size_t>(G), 0.0);
                    for (int64_t h = 0; h < H; ++h) groupScore[static_cast<size_t>(h / group)] += s[static_cast<size_t>(h)];
                    const int64_t count = std::min<int64_t>(G - 1, std::llround(ratio * double(G)));
                    for (int64_t g : lowest(groupScore, count))
                        for (int64_t h = g * group; h < (g + 1) * group; ++h) removeQuery[l].insert(h);
                } else {
                    const int64_t count = std::min<int64_t>(group - 1, std::llround(ratio * double(group)));
                    if (count == 0 && group > 1) ctx.note("layer " + std::to_string(l) + ": ratio too small to remove a head of a group of " + std::to_string(group));
                    if (group == 1) {   // MHA: each head is its own kv group
                        const int64_t c = std::min<int64_t>(H - 1, std::llround(ratio * double(H)));
                        for (int64_t h : lowest(s, c)) removeQuery[l].insert(h);
                        continue;
                    }
                    for (int64_t g = 0; g < G; ++g) {
                        std::vector<double> inGroup(s.begin() + g * group, s.begin() + (g + 1) * group);
                        for (int64_t h : lowest(inGroup, count)) removeQuery[l].insert(g * group + h);
                    }
                }
            }
        }
        m.spec.makeLayerShapesExplicit();
        for (const auto& [l, removed] : removeQuery) removeHeads(ctx, l, removed);
        for (auto& kv : removeQuery) {
            const int64_t l = kv.first, removed = int64_t(kv.second.size()), heads = removed + m.spec.headsAt(l);
            std::string line = "layer " + std::to_string(l) + ": removed " + std::to_string(removed) + " of " +
                               std::to_string(heads) + " query heads (" + std::to_string(int(std::lround(100.0 * removed / heads))) + "%)";
            if (!ctx.params.contains("heads") || ctx.params["heads"].get<std::string>().empty()) {
                // Heads go in whole kv groups or evenly from each group, so the ratio rounds to what the groups allow.
                const double asked = ctx.paramsFor(names::llamaLayer(l, "self_attn.q_proj"))["ratio"].get<double>();
                if (std::abs(double(removed) / double(heads) - asked) > 1e-9) {
                    char text[160];
                    std::snprintf(text, sizeof text, "; ratio %.3g asked, rounded to what %s allows", asked,
                                  ctx.params["unit"] == "kv_group" ? "whole kv groups" : "whole heads, as many from each kv group");
                    line += text;
                }
            }
            ctx.note(line);
        }
    }

private:
    // Importance of each query head per block (empty vectors for blocks not targeted).
    std::vector<std::vector<double>> scores(StepContext& ctx, const std::set<int64_t>& targeted) const {
        Model& m = ctx.model;
        std::vector<std::vector<double>> out(static_cast<size_t>(m.spec.layers));
        if (ctx.params["importance"] == "weight") {
            for (int64_t l : targeted) {
                at::Tensor q = m.floatTensor(names::llamaLayer(l, "self_attn.q_proj.weight"));
                at::Tensor o = m.floatTensor(names::llamaLayer(l, "self_attn.o_proj.weight"));
                const int64_t H = m.spec.headsAt(l), hd = m.spec.headDim;
                for (int64_t h = 0; h < H; ++h)
                    out[static_cast<size_t>(l)].push_back(q.narrow(0, h * hd, hd).norm().item<double>() *
                                                          o.narrow(1, h * hd, hd).norm().item<double>());
            }
            return out;
        }
        std::vector<at::Tensor> sums(static_cast<size_t>(m.spec.layers));
        std::vector<int64_t> rows(static_cast<size_t>(m.spec.layers), 0);
        std::vector<at::Tensor> wo(static_cast<size_t>(m.spec.layers));
        for (int64_t l : targeted) wo[static_cast<size_t>(l)] = m.floatTensor(names::llamaLayer(l, "self_attn.o_proj.weight"));
        SequentialPass pass;
        pass.collectHeads = [&](int64_t l, const at::Tensor& heads) {   // [rows, H, hd]
            if (!targeted.count(l)) return;
            const int64_t H = heads.size(1), hd = heads.size(2);
            at::Tensor w = wo[static_cast<size_t>(l)].view({-1, H, hd});   // [hidden, H, hd]
            // Contribution of head h to the block output: W_o[:, h] · out_h; its norm per row, summed over rows.
            at::Tensor contrib = at::einsum("rhd,ohd->rho", {heads, w}).norm(2, {2}).sum(0);
            auto& s = sums[static_cast<size_t>(l)];
            s = s.defined() ? s + contrib : contrib;
            rows[static_cast<size_t>(l)] += heads.size(0);
        };
        runSequential(m, ctx.calibration, pass, ctx.feedback);
        for (int64_t l : targeted) {
            at::Tensor mean = (sums[static_cast<size_t>(l)] / double(rows[static_cast<size_t>(l)])).to(at::kDouble).contiguous();
            out[static_cast<size_t>(l)].assign(mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel());
        }
        return out;
    }

    void removeHeads(StepContext& ctx, int64_t l, const std::set<int64_t>& removed) const {
        Model& m = ctx.model;
        const int64_t H = m.spec.headsAt(l), G = m.spec.kvHeadsAt(l), group = H / G, hd = m.spec.headDim;
        std::vector<int64_t> perGroup(static_cast<size_t>(G), 0);
        for (int64_t h : removed) ++perGroup[static_cast<size_t>(h / group)];
        std::vector<int64_t> keptHeads, keptGroups;
        int64_t removedPerKeptGroup = -1;
        for (int64_t g = 0; g < G; ++g) {
            if (perGroup[static_cast<size_t>(g)] == group) continue;   // the whole kv group goes
            if (removedPerKeptGroup >= 0 && perGroup[static_cast<size_t>(g)] != removedPerKeptGroup)
                throw Error("prune.heads: layer " + std::to_string(l) + " would keep kv groups of different sizes; "
                            "remove the same number of query heads from every group (or whole groups)");
            removedPerKeptGroup = perGroup[static_cast<size_t>(g)];
            keptGroups.push_back(g);
            for (int64_t h = g * group; h < (g + 1) * group; ++h)
                if (!removed.count(h)) keptHeads.push_back(h);
        }
        if (keptHeads.empty()) throw Error("prune.heads: layer " + std::to_string(l) + " would lose every head");
        auto name = [&](const char* suffix) { return names::llamaLayer(l, suffix); };
        keepSlices(m, name("self_attn.q_proj.weight"), 0, headRows(keptHeads, hd));
        keepSlices(m, name("self_attn.q_proj.bias"), 0, headRows(keptHeads, hd));
        keepSlices(m, name("self_attn.o_proj.weight"), 1, headRows(keptHeads, hd));
        if (static_cast<int64_t>(keptGroups.size()) != G)
            for (const char* t : {"self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias"})
                keepSlices(m, name(t), 0, headRows(keptGroups, hd));
        auto& shape = m.spec.layerShapes.at(static_cast<size_t>(l));
        shape.heads = static_cast<int64_t>(keptHeads.size());
        shape.kvHeads = static_cast<int64_t>(keptGroups.size());
    }
};

class ChannelPruning : public CompressionMethod {
public:
    std::string id() const override { return "prune.channels"; }
    bool actsPerLinearLayer() const override { return false; }
    std::string blockSelector(Family family) const override { return family == Family::Llama ? "mlp.down_proj" : "mlp.c_proj"; }
    int version() const override { return 1; }
    std::string displayName() const override { return "MLP channel pruning"; }
    std::string summary() const override { return "removes intermediate channels of the MLP (rows of up/gate, columns of down)"; }
    std::vector<ParamSpec> params() const override {
        return {floatParam("ratio", 0.0, 0.9, 0.25, "fraction of intermediate channels removed in each targeted layer"),
                choiceParam("importance", {"activation", "weight"}, "activation",
                            "activation: mean |activation| on calibration data × ‖down column‖; weight: ‖up row‖·‖down column‖")};
    }
    bool needsCalibration(const nlohmann::json& p) const override { return p["importance"] == "activation"; }
    void apply(StepContext& ctx) const override {
        Model& m = ctx.model;
        const bool llama = m.spec.family == Family::Llama;
        const std::string downSuffix = blockSelector(m.spec.family), upSuffix = llama ? "mlp.up_proj" : "mlp.c_fc";
        auto layerName = [&](int64_t l, const std::string& s) { return llama ? names::llamaLayer(l, s) : names::gpt2Layer(l, s); };
        std::set<int64_t> targeted;
        for (const auto& layer : ctx.layers)
            if (layer.find(downSuffix) != std::string::npos) targeted.insert(blockOf(layer));
        std::map<int64_t, at::Tensor> activation;   // per block: Σ|x| per channel
        std::map<int64_t, int64_t> rows;
        if (ctx.params["importance"] == "activation") {
            SequentialPass pass;
            pass.layersOf = [&](int64_t b) {
                return targeted.count(b) ? std::vector<std::string>{layerName(b, downSuffix)} : std::vector<std::string>{};
            };
            pass.collect = [&](const std::string& layer, const at::Tensor& x) {
                const int64_t b = blockOf(layer);
                at::Tensor s = x.abs().sum(0);
                activation[b] = activation.count(b) ? activation[b] + s : s;
                rows[b] += x.size(0);
            };
            runSequential(m, ctx.calibration, pass, ctx.feedback);
        }
        m.spec.makeLayerShapesExplicit();
        for (int64_t l : targeted) {
            at::Tensor down = m.floatTensor(layerName(l, downSuffix) + ".weight");
            at::Tensor score = down.norm(2, {0});
            score = activation.count(l) ? score * activation[l] / double(rows[l]) : score * m.floatTensor(layerName(l, upSuffix) + ".weight").norm(2, {1});
            const int64_t F = down.size(1);
            const double ratio = ctx.paramsFor(layerName(l, downSuffix))["ratio"].get<double>();   // overrides give per-layer ratios
            const int64_t count = std::min<int64_t>(F - 1, std::llround(ratio * double(F)));
            at::Tensor s = score.to(at::kDouble).contiguous();
            std::vector<int64_t> drop = lowest(std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + F), count);
            std::vector<int64_t> keep;
            for (int64_t c = 0, d = 0; c < F; ++c) {
                if (d < static_cast<int64_t>(drop.size()) && drop[static_cast<size_t>(d)] == c) ++d;
                else keep.push_back(c);
            }
            if (llama) {
                keepSlices(m, layerName(l, "mlp.gate_proj.weight"), 0, keep);
                keepSlices(m, layerName(l, "mlp.up_proj.weight"), 0, keep);
            } else {
                keepSlices(m, layerName(l, "mlp.c_fc.weight"), 0, keep);
                keepSlices(m, layerName(l, "mlp.c_fc.bias"), 0, keep);
            }
            keepSlices(m, layerName(l, downSuffix + ".weight"), 1, keep);
            m.spec.layerShapes.at(static_cast<size_t>(l)).ffn = static_cast<int64_t>(keep.size());
            ctx.note("layer " + std::to_string(l) + ": " + std::to_string(F) + " -> " + std::to_string(keep.size()) + " channels");
        }
    }
};

// Sorts and deduplicates `drop`; throws cwb::Error for a block the model does not have, or when every block would go.
void checkBlocksToDrop(std::vector<int64_t>& drop, int64_t blocks) {
    std::sort(drop.begin(), drop.end());
    drop.erase(std::unique(drop.begin(), drop.end()), drop.end());
    for (int64_t b : drop)
        if (b < 0 || b >= blocks)
            throw Error("prune.layers: no block " + std::to_string(b) + " in this model (blocks 0.." + std::to_string(blocks - 1) + ")");
    if (static_cast<int64_t>(drop.size()) >= blocks) throw Error("prune.layers: cannot remove every block");
}

class LayerDropping : public CompressionMethod {
public:
    std::string id() const override { return "prune.layers"; }
    bool actsPerLinearLayer() const override { return false; }
    bool readsLayerPatterns() const override { return false; }
    int version() const override { return 1; }
    std::string displayName() const override { return "Block dropping"; }
    std::string summary() const override { return "removes whole transformer blocks, those that change their input least"; }
    std::vector<ParamSpec> params() const override {
        return {intParam("count", 0, 1024, 1, "blocks to remove"),
                choiceParam("importance", {"block_influence", "last"}, "block_influence",
                            "block_influence: 1 − cos(input, output) on calibration data (lowest goes); last: the blocks just before the final one"),
                textParam("layers", "", "explicit blocks to remove, e.g. '3,4' (overrides count and importance)")};
    }
    bool needsCalibration(const nlohmann::json& p) const override {
        return p["layers"].get<std::string>().empty() && p["importance"] == "block_influence" && p["count"].get<int64_t>() > 0;
    }
    std::string modelProblem(const Model& model, const nlohmann::json& p) const override {
        const int64_t L = model.spec.layers;
        try {
            std::vector<int64_t> drop = parseIntList(p["layers"], "prune.layers");
            if (drop.empty()) {
                const int64_t count = p["count"].get<int64_t>();
                if (count >= L) return "prune.layers: cannot remove " + std::to_string(count) + " of " + std::to_string(L) + " blocks";
                return "";
            }
            checkBlocksToDrop(drop, L);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    void apply(StepContext& ctx) const override {
        Model& m = ctx.model;
        const int64_t L = m.spec.layers;
        std::vector<int64_t> drop = parseIntList(ctx.params["layers"], "prune.layers");
        if (drop.empty()) {
            const int64_t count = ctx.params["count"].get<int64_t>();
            if (count == 0) {   // nothing to remove: no influence pass
                ctx.note("removed no block (count 0)");
                return;
            }
            if (count >= L) throw Error("prune.layers: cannot remove " + std::to_string(count) + " of " + std::to_string(L) + " blocks");
            if (ctx.params["importance"] == "last") {
                for (int64_t i = 0; i < count; ++i) drop.push_back(L - 2 - i >= 0 ? L - 2 - i : L - 1 - i);
            } else {
                std::vector<double> sum(static_cast<size_t>(L), 0.0);
                std::vector<int64_t> n(static_cast<size_t>(L), 0);
                SequentialPass pass;
                pass.collectBlockIO = [&](int64_t b, const at::Tensor& in, const at::Tensor& out) {
                    sum[static_cast<size_t>(b)] += (1.0 - at::cosine_similarity(in, out, 1)).sum().item<double>();
                    n[static_cast<size_t>(b)] += in.size(0);
                };
                runSequential(m, ctx.calibration, pass, ctx.feedback);
                std::vector<double> influence(static_cast<size_t>(L));
                for (int64_t b = 0; b < L; ++b) influence[static_cast<size_t>(b)] = sum[static_cast<size_t>(b)] / double(n[static_cast<size_t>(b)]);
                drop = lowest(influence, count);
                std::string text;
                for (int64_t b = 0; b < L; ++b) text += (b ? ", " : "") + std::to_string(influence[static_cast<size_t>(b)]);
                ctx.note("block influence: " + text);
            }
        }
        checkBlocksToDrop(drop, L);
        const bool llama = m.spec.family == Family::Llama;
        auto prefix = [&](int64_t b) { return llama ? names::llamaLayer(b, "") : names::gpt2Layer(b, ""); };
        m.spec.makeLayerShapesExplicit();
        std::vector<LayerShape> shapes;
        int64_t next = 0;
        for (int64_t b = 0; b < L; ++b) {
            const std::vector<std::string> all = m.tensorNames();
            const std::string from = prefix(b);
            const bool dropped = std::binary_search(drop.begin(), drop.end(), b);
            for (const auto& name : all) {
                if (name.compare(0, from.size(), from) != 0) continue;
                if (dropped) m.removeTensor(name);
                else if (next != b) m.renameTensor(name, prefix(next) + name.substr(from.size()));
            }
            if (!dropped) {
                shapes.push_back(m.spec.layerShapes[static_cast<size_t>(b)]);
                ++next;
            }
        }
        m.spec.layers = next;
        m.spec.layerShapes = shapes;
        std::string text;
        for (int64_t b : drop) text += (text.empty() ? "" : ", ") + std::to_string(b);
        ctx.note("removed blocks " + text);
    }
};

} // namespace

void registerStructuredMethods(MethodRegistry& registry) {
    registry.add(std::make_unique<HeadPruning>());
    registry.add(std::make_unique<ChannelPruning>());
    registry.add(std::make_unique<LayerDropping>());
}

} // namespace cwb
