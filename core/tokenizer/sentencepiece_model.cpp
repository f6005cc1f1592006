// SentencePiece's tokenizer.model: a protobuf ModelProto (sentencepiece_model.proto). Only the fields a Llama-style
// BPE vocabulary needs are read; the rest are skipped by wire type. Every length is checked against what is left of
// the file, so a truncated or hostile file fails with its name and the field, never reads past the end.
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"

namespace cwb {

namespace {

class ProtoReader {
public:
    ProtoReader(const std::string& file, const uint8_t* data, size_t size) : mFile(file), mData(data), mSize(size) {}

    bool done() const { return mAt >= mSize; }

    uint64_t varint(const char* what) {
        uint64_t value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (mAt >= mSize) fail(std::string(what) + " runs past the end of the file");
            const uint8_t byte = mData[mAt++];
            value |= uint64_t(byte & 0x7f) << shift;
            if (!(byte & 0x80)) return value;
        }
        fail(std::string(what) + " is a varint longer than 10 bytes");
    }

    // The next field's number and wire type.
    std::pair<uint32_t, uint32_t> key() {
        const uint64_t k = varint("a field key");
        return {uint32_t(k >> 3), uint32_t(k & 7)};
    }

    ProtoReader message(const char* what) {
        const size_t length = lengthOf(what);
        ProtoReader inner(mFile, mData + mAt, length);
        mAt += length;
        return inner;
    }

    std::string bytes(const char* what) {
        const size_t length = lengthOf(what);
        std::string out(reinterpret_cast<const char*>(mData + mAt), length);
        mAt += length;
        return out;
    }

    float fixed32Float(const char* what) {
        if (mSize - mAt < 4) fail(std::string(what) + " runs past the end of the file");
        float value;
        std::memcpy(&value, mData + mAt, 4);   // protobuf is little-endian, as every machine cwb builds for
        mAt += 4;
        return value;
    }

    void skip(uint32_t wireType, const char* what) {
        switch (wireType) {
        case 0: varint(what); return;
        case 1: advance(8, what); return;
        case 2: advance(lengthOf(what), what); return;
        case 5: advance(4, what); return;
        default: fail(std::string(what) + " has wire type " + std::to_string(wireType) + ", which protobuf does not have");
        }
    }

    [[noreturn]] void fail(const std::string& problem) const {
        throw Error(mFile, "not a SentencePiece model, or a damaged one: " + problem);
    }

private:
    size_t lengthOf(const char* what) {
        const uint64_t length = varint(what);
        if (length > mSize - mAt) fail(std::string(what) + " runs past the end of the file");
        return size_t(length);
    }
    void advance(size_t n, const char* what) {
        if (n > mSize - mAt) fail(std::string(what) + " runs past the end of the file");
        mAt += n;
    }

    const std::string& mFile;
    const uint8_t* mData;
    size_t mSize;
    size_t mAt = 0;
};

struct PieceRecord {
    std::string piece;
    float score = 0;
    int32_t type = 1;   // NORMAL
};

PieceRecord readPiece(ProtoReader r) {
    PieceRecord p;
    while (!r.done()) {
        const auto [field, wire] = r.key();
        if (field == 1 && wire == 2) p.piece = r.bytes("a piece");
        else if (field == 2 && wire == 5) p.score = r.fixed32Float("a piece's score");
        else if (field == 3 && wire == 0) p.type = int32_t(r.varint("a piece's type"));
        else r.skip(wire, "a piece's field");
    }
    return p;
}

} // namespace

std::unique_ptr<Tokenizer> loadSentencePieceTokenizer(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, "cannot open the SentencePiece model");
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(path, "cannot read the SentencePiece model");
    ProtoReader r(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());

    TokenizerData d;
    d.model = "llama";
    d.addBos = true;
    int64_t modelType = 1;   // TrainerSpec.model_type: UNIGRAM unless the file says otherwise
    int64_t unk = 0, bos = 1, eos = 2, pad = -1;
    std::string normalizer;
    bool dummyPrefix = true;
    while (!r.done()) {
        const auto [field, wire] = r.key();
        if (field == 1 && wire == 2) {
            const PieceRecord p = readPiece(r.message("a piece"));
            if (p.type < 1 || p.type > 6) r.fail("piece " + std::to_string(d.tokens.size()) + " has type " + std::to_string(p.type));
            d.tokens.push_back(p.piece);
            d.scores.push_back(p.score);
            d.types.push_back(p.type);
        } else if (field == 2 && wire == 2) {   // TrainerSpec
            ProtoReader t = r.message("the trainer spec");
            while (!t.done()) {
                const auto [f, w] = t.key();
                // Ids are int32 in the proto: -1 arrives as a 10-byte varint, which the cast turns back into -1.
                if (w == 0 && (f == 3 || (f >= 40 && f <= 43))) {
                    const int64_t v = int64_t(int32_t(t.varint("a trainer spec field")));
                    (f == 3 ? modelType : f == 40 ? unk : f == 41 ? bos : f == 42 ? eos : pad) = v;
                } else {
                    t.skip(w, "a trainer spec field");
                }
            }
        } else if (field == 3 && wire == 2) {   // NormalizerSpec
            ProtoReader n = r.message("the normalizer spec");
            while (!n.done()) {
                const auto [f, w] = n.key();
                if (f == 1 && w == 2) normalizer = n.bytes("the normalizer's name");
                else if (f == 3 && w == 0) dummyPrefix = n.varint("add_dummy_prefix") != 0;
                else n.skip(w, "a normalizer spec field");
            }
        } else {
            r.skip(wire, "a field");
        }
    }
    if (d.tokens.empty()) r.fail("it holds no pieces");
    if (modelType != 2)
        throw Error(path, std::string("a SentencePiece ") + (modelType == 1 ? "unigram" : "type " + std::to_string(modelType)) +
                              " model; cwb reads SentencePiece BPE models (Llama, Mistral), or a tokenizer.json");
    // Llama's vocabularies normalize nothing ("identity"); NFKC and the like are not implemented, and silently skipping
    // them would give other tokens than the model was trained on. remove_extra_whitespaces is not applied, as in
    // llama.cpp, whose GGUF conversion of the same file keeps every space.
    if (!normalizer.empty() && normalizer != "identity")
        throw Error(path, "the SentencePiece model normalizes its text with '" + normalizer +
                              "', which cwb does not implement (it reads models with the identity normalizer, as Llama's)");
    const int64_t count = int64_t(d.tokens.size());
    const auto id = [&](int64_t v, const char* what) -> TokenId {
        if (v < -1 || v >= count) r.fail(std::string(what) + " id " + std::to_string(v) + " is outside the " + std::to_string(count) + " pieces");
        return TokenId(v);
    };
    d.unk = id(unk, "the unknown token's");
    d.bos = id(bos, "BOS's");
    d.eos = id(eos, "EOS's");
    d.pad = id(pad, "the padding token's");
    d.addSpacePrefix = dummyPrefix;
    try {
        return makeTokenizer(d);
    } catch (const Error& e) {
        throw Error(path, e.what());
    }
}

} // namespace cwb
