// GgufFile / GgufWriter: every metadata value type round-trips; the real fixtures parse as documented.
#include <QTemporaryDir>

#include <fstream>
#include <QDir>
#include <QFileInfo>
#include <QtTest/QtTest>

#include "core/io/gguf_file.h"
#include "core/util/error.h"
#include "tests/support/test_paths.h"

using namespace cwb;

class TestGgufFile : public QObject {
    Q_OBJECT
private slots:
    void everyValueTypeRoundTrips();
    void tensorsRoundTripWithAlignment();
    void version2Reads();
    void stories260kDirectory();
    void randomLlamaVocabulary();
};

void TestGgufFile::everyValueTypeRoundTrips() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("kv.gguf").toStdString();
    GgufWriter w;
    w.add("u8", {GgufValueType::UInt8, GgufValueType::UInt8, 200});
    w.add("i8", {GgufValueType::Int8, GgufValueType::UInt8, -100});
    w.add("u16", {GgufValueType::UInt16, GgufValueType::UInt8, 60000});
    w.add("i16", {GgufValueType::Int16, GgufValueType::UInt8, -30000});
    w.add("u32", {GgufValueType::UInt32, GgufValueType::UInt8, 4000000000u});
    w.add("i32", {GgufValueType::Int32, GgufValueType::UInt8, -2000000000});
    w.add("f32", {GgufValueType::Float32, GgufValueType::UInt8, 0.25f});
    w.add("bool", {GgufValueType::Bool, GgufValueType::UInt8, true});
    w.add("str", {GgufValueType::String, GgufValueType::UInt8, "héllo"});
    w.add("u64", {GgufValueType::UInt64, GgufValueType::UInt8, uint64_t(1) << 40});
    w.add("i64", {GgufValueType::Int64, GgufValueType::UInt8, -(int64_t(1) << 40)});
    w.add("f64", {GgufValueType::Float64, GgufValueType::UInt8, 1e-300});
    w.addArray<int32_t>("arr_i32", GgufValueType::Int32, {1, -2, 3});
    w.addStringArray("arr_str", {"a", "", "ccc"});
    w.write(path);

    GgufFile g = GgufFile::open(path);
    QCOMPARE(g.version, 3u);
    QCOMPARE(g.metadata.size(), size_t(14));
    QCOMPARE(g.integer("u8"), int64_t(200));
    QCOMPARE(g.integer("i8"), int64_t(-100));
    QCOMPARE(g.integer("u16"), int64_t(60000));
    QCOMPARE(g.integer("i16"), int64_t(-30000));
    QCOMPARE(g.integer("u32"), int64_t(4000000000));
    QCOMPARE(g.integer("i32"), int64_t(-2000000000));
    QCOMPARE(g.number("f32"), 0.25);
    QCOMPARE(g.integer("bool"), int64_t(1));
    QCOMPARE(QString::fromStdString(g.string("str")), QString::fromUtf8("héllo"));
    QCOMPARE(g.integer("u64"), int64_t(1) << 40);
    QCOMPARE(g.integer("i64"), -(int64_t(1) << 40));
    QCOMPARE(g.number("f64"), 1e-300);
    QCOMPARE(g.array("arr_i32").size(), size_t(3));
    QCOMPARE(g.array("arr_i32")[1].get<int>(), -2);
    QCOMPARE(g.array("arr_str")[2].get<std::string>(), std::string("ccc"));
    QCOMPARE(g.metadata.at("arr_str").elementType, GgufValueType::String);
    QVERIFY_THROWS_EXCEPTION(Error, g.string("u8"));
    QVERIFY_THROWS_EXCEPTION(Error, g.integer("missing"));
}

void TestGgufFile::tensorsRoundTripWithAlignment() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("t.gguf").toStdString();
    GgufWriter w;
    w.setAlignment(64);
    std::vector<uint8_t> a(3 * 4), b(5 * 2 * 4);
    for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(255 - i);
    w.addTensor("a", ggml::Type::F32, {3}, a);
    w.addTensor("b", ggml::Type::F32, {5, 2}, b);
    w.write(path);
    GgufFile g = GgufFile::open(path);
    QCOMPARE(g.alignment, 64u);
    QCOMPARE(g.dataOffset % 64, size_t(0));
    QCOMPARE(g.tensors.size(), size_t(2));
    QCOMPARE(g.tensors[1].ne, (std::vector<int64_t>{5, 2}));
    QCOMPARE(g.tensors[1].offset % 64, uint64_t(0));
    QVERIFY(std::memcmp(g.tensorData(g.tensors[0]), a.data(), a.size()) == 0);
    QVERIFY(std::memcmp(g.tensorData(g.tensors[1]), b.data(), b.size()) == 0);
    const QFileInfo written(QString::fromStdString(path));
    QVERIFY(written.dir().entryList({written.fileName() + ".tmp*"}, QDir::AllEntries | QDir::Hidden | QDir::System).isEmpty());
}

void TestGgufFile::version2Reads() {
    // v2 and v3 share the layout (64-bit counts and lengths); v3 only added big-endian files.
    QTemporaryDir dir;
    const std::string path = dir.filePath("v2.gguf").toStdString();
    GgufWriter w;
    w.addString("general.architecture", "llama");
    w.addTensor("t", ggml::Type::F32, {4}, std::vector<uint8_t>(16, 7));
    w.write(path);
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        const uint32_t two = 2;
        f.seekp(4);
        f.write(reinterpret_cast<const char*>(&two), 4);
    }
    GgufFile g = GgufFile::open(path);
    QCOMPARE(g.version, 2u);
    QCOMPARE(QString::fromStdString(g.string("general.architecture")), QStringLiteral("llama"));
    QCOMPARE(g.tensors.at(0).bytes, size_t(16));
}

void TestGgufFile::stories260kDirectory() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    GgufFile g = GgufFile::open(path.toStdString());
    // Facts from the fixtures README.
    QCOMPARE(g.version, 3u);
    QCOMPARE(g.tensors.size(), size_t(48));
    QCOMPARE(g.metadata.size(), size_t(19));
    QCOMPARE(g.dataOffset, size_t(14176));
    QCOMPARE(g.integer("llama.block_count"), int64_t(5));
    QCOMPARE(g.integer("llama.attention.head_count_kv"), int64_t(4));
    QCOMPARE(g.array("tokenizer.ggml.tokens").size(), size_t(512));
}

void TestGgufFile::randomLlamaVocabulary() {
    CWB_REQUIRE_FIXTURE(path, "models/llama-2-tiny-random.gguf");
    GgufFile g = GgufFile::open(path.toStdString());
    QCOMPARE(g.tensors.size(), size_t(12));
    QCOMPARE(g.metadata.size(), size_t(18));
    QCOMPARE(g.dataOffset, size_t(724416));
    QCOMPARE(g.integer("general.file_type"), int64_t(1));
    QCOMPARE(g.array("tokenizer.ggml.tokens").size(), size_t(32000));
}

QTEST_APPLESS_MAIN(TestGgufFile)
#include "test_gguf_file.moc"
