// Chat prompts: the format read off a chat template, conversations rendered in each format (expected strings written
// from the published templates: Llama 2/3, ChatML, Mistral, Zephyr, Phi-3, Gemma 3), control tokens parsed only when
// asked, stop ids from GGUF and generation_config.json, and generation that ends at them.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/export/export_format.h"
#include "core/io/model_format.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"
#include "core/tokenizer/byte_bpe_tokenizer.h"
#include "core/tokenizer/chat_format.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"
#include "tests/support/test_paths.h"

using namespace cwb;

namespace {

// A byte-level vocabulary with ChatML's markers as control tokens: the 256 byte characters, then the markers.
TokenizerData chatMlVocabulary() {
    TokenizerData d;
    d.model = "gpt2";
    for (int b = 0; b < 256; ++b) d.tokens.push_back(ByteBpeTokenizer::byteToUnicode()[size_t(b)]);
    for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) d.tokens.push_back(t);   // 256, 257, 258
    d.types.assign(d.tokens.size(), int32_t(TokenType::Normal));
    for (int i = 256; i < 259; ++i) d.types[size_t(i)] = int32_t(TokenType::Control);
    d.eos = 256;
    d.addBos = false;
    d.chatTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                     "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    return d;
}

std::vector<ChatMessage> conversation(bool system) {
    std::vector<ChatMessage> m;
    if (system) m.push_back({"system", "Be brief."});
    m.push_back({"user", " Hi "});
    m.push_back({"assistant", "Hello."});
    m.push_back({"user", "Why?"});
    return m;
}

} // namespace

class TestChatFormat : public QObject {
    Q_OBJECT
private slots:
    void detectsFormats_data();
    void detectsFormats();
    void rendersConversations_data();
    void rendersConversations();
    void refusesBadConversations();
    void preparesPromptFromTheTemplate();
    void templateDefaultsAreWritten();
    void spmParsesControlTokensOnlyWhenAsked();
    void stopIdsTravelThroughGgufAndHf();
    void generationEndsAtStopIds();
};

void TestChatFormat::detectsFormats_data() {
    QTest::addColumn<QString>("jinja");
    QTest::addColumn<QString>("format");
    QTest::newRow("chatml") << "{{'<|im_start|>' + message['role'] + '\\n'}}" << "chatml";
    QTest::newRow("llama3") << "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}" << "llama3";
    QTest::newRow("llama2") << "{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content.strip() + ' [/INST]' }}" << "llama2";
    QTest::newRow("mistral") << "{{ '[INST] ' + message['content'] + ' [/INST]' }}" << "mistral";
    QTest::newRow("zephyr") << "{{ '<|user|>\\n' + message['content'] + eos_token }}" << "zephyr";
    QTest::newRow("phi3") << "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}" << "phi3";
    QTest::newRow("gemma") << "{{ '<start_of_turn>' + role + '\\n' }}" << "gemma";
    QTest::newRow("unknown") << "{{ '### Human: ' + message['content'] }}" << "unknown";
    // Relatives sharing a marker but writing other text: left to the caller to name, not rendered wrongly.
    QTest::newRow("phi4 (<|im_sep|>)") << "{{'<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>'}}" << "unknown";
    QTest::newRow("glm4 ([gMASK])") << "[gMASK]<sop>{{ '<|user|>\n' + message['content'] }}" << "unknown";
    QTest::newRow("phi4-mini (no newline after the role)") << "{{ '<|user|>' + message['content'] + '<|end|>' }}" << "unknown";
    QTest::newRow("mistral v3 ([/INST] without a space)") << "{{ '[INST] ' + message['content'] + '[/INST]' }}" << "unknown";
    QTest::newRow("mistral v1 (' [INST] ')") << "{{ ' [INST] ' + message['content'] + ' [/INST]' }}" << "unknown";
    QTest::newRow("mistral v7 ([SYSTEM_PROMPT])") << "{{ '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT]' + '[INST] ' + c + ' [/INST]' }}" << "unknown";
}

void TestChatFormat::detectsFormats() {
    QFETCH(QString, jinja);
    QFETCH(QString, format);
    QCOMPARE(QString::fromStdString(chatFormatName(detectChatFormat(jinja.toStdString()))), format);
    if (format != "unknown") QCOMPARE(chatFormatFromName(format.toStdString()), detectChatFormat(jinja.toStdString()));
}

void TestChatFormat::rendersConversations_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<bool>("system");
    QTest::addColumn<QString>("expected");
    QTest::newRow("chatml") << "chatml" << true
        << "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
           "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n";
    QTest::newRow("llama3 (contents trimmed)") << "llama3" << true
        << "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n";
    QTest::newRow("llama2 (system inside the first [INST])") << "llama2" << true
        << "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello. </s><s>[INST] Why? [/INST]";
    QTest::newRow("llama2 without system") << "llama2" << false << "[INST] Hi [/INST] Hello. </s><s>[INST] Why? [/INST]";
    QTest::newRow("mistral (system before the first user message)") << "mistral" << true
        << "[INST] Be brief.\n\n Hi  [/INST]Hello.</s>[INST] Why? [/INST]";
    QTest::newRow("zephyr") << "zephyr" << true
        << "<|system|>\nBe brief.</s>\n<|user|>\n Hi </s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhy?</s>\n<|assistant|>\n";
    QTest::newRow("phi3") << "phi3" << false
        << "<|user|>\n Hi <|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nWhy?<|end|>\n<|assistant|>\n";
    QTest::newRow("gemma (assistant is model; system opens the first turn)") << "gemma" << true
        << "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
           "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n";
}

void TestChatFormat::rendersConversations() {
    QFETCH(QString, format);
    QFETCH(bool, system);
    QFETCH(QString, expected);
    const ChatFormat f = chatFormatFromName(format.toStdString());
    QVERIFY(f != ChatFormat::Unknown);
    QCOMPARE(QString::fromStdString(renderChat(f, conversation(system))), expected);
}

void TestChatFormat::refusesBadConversations() {
    auto refusal = [](ChatFormat f, std::vector<ChatMessage> m) -> QString {
        try {
            renderChat(f, m);
        } catch (const Error& e) {
            return QString::fromStdString(e.what());
        }
        return QString();
    };
    QVERIFY(refusal(ChatFormat::ChatMl, {}).contains("empty"));
    QVERIFY(refusal(ChatFormat::ChatMl, {{"user", "a"}, {"user", "b"}}).contains("alternate"));
    QVERIFY(refusal(ChatFormat::ChatMl, {{"user", "a"}, {"assistant", "b"}}).contains("end with a user message"));
    QVERIFY(refusal(ChatFormat::ChatMl, {{"user", "a"}, {"system", "b"}, {"user", "c"}}).contains("system only first"));
    QVERIFY(refusal(ChatFormat::ChatMl, {{"tool", "a"}}).contains("role 'tool'"));
    QVERIFY(refusal(ChatFormat::Unknown, {{"user", "a"}}).contains("no chat format"));
}

void TestChatFormat::preparesPromptFromTheTemplate() {
    auto tokenizer = makeTokenizer(chatMlVocabulary());
    const ChatPrompt prompt = prepareChatPrompt(*tokenizer, {{"user", "x"}});
    QCOMPARE(prompt.format, ChatFormat::ChatMl);
    QCOMPARE(QString::fromStdString(prompt.text), QString("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"));
    QCOMPARE(prompt.stopIds, (std::vector<TokenId>{258}));
    QVERIFY(prompt.warnings.empty());
    // The markers become their control ids, not bytes.
    const std::vector<TokenId> ids = tokenizer->encodeWithSpecialTokens(prompt.text, tokenizer->addBosByDefault());
    QCOMPARE(ids.front(), TokenId(257));
    QCOMPARE(std::count(ids.begin(), ids.end(), TokenId(257)), 2);
    QCOMPARE(std::count(ids.begin(), ids.end(), TokenId(258)), 1);

    // A named format the vocabulary lacks the markers of: rendered, with a warning, and only EOS stops it.
    const ChatPrompt llama3 = prepareChatPrompt(*tokenizer, {{"user", "x"}}, ChatFormat::Llama3);
    QVERIFY(llama3.stopIds.empty());
    QCOMPARE(int(llama3.warnings.size()), 1);
    QVERIFY(QString::fromStdString(llama3.warnings[0]).contains("<|eot_id|>"));

    // Formats that end turns with EOS write the model's own EOS text (here <|endoftext|>, as StableLM-Zephyr's), and
    // the tokenizer's EOS stops them; an empty system message is still a system message.
    const ChatPrompt zephyr = prepareChatPrompt(*tokenizer, {{"system", ""}, {"user", "x"}}, ChatFormat::Zephyr);
    QCOMPARE(QString::fromStdString(zephyr.text), QString("<|system|>\n<|endoftext|>\n<|user|>\nx<|endoftext|>\n<|assistant|>\n"));
    QVERIFY(zephyr.stopIds.empty() && zephyr.warnings.empty());
    QCOMPARE(QString::fromStdString(renderChat(ChatFormat::ChatMl, {{"system", ""}, {"user", "x"}})),
             QString("<|im_start|>system\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"));

    // No template, or one cwb does not know, and no format named: refused with the names to choose from.
    TokenizerData none = chatMlVocabulary();
    none.chatTemplate.clear();
    auto plain = makeTokenizer(none);
    try {
        prepareChatPrompt(*plain, {{"user", "x"}});
        QFAIL("a model without a chat template needs a named format");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("no chat template") && QString(e.what()).contains("chatml, llama3"), e.what());
    }
    none.chatTemplate = "{{ '### Human: ' + message['content'] }}";
    auto odd = makeTokenizer(none);
    try {
        prepareChatPrompt(*odd, {{"user", "x"}});
        QFAIL("an unrecognised template needs a named format");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("not one cwb recognises"), e.what());
    }
}

// The text templates write by themselves, which the renderer left out before: Qwen2's default system message and
// Llama 3.1's dated system turn. Templates as their tokenizer_config.json holds them (Jinja source: \n escaped);
// expected strings from the published templates' output.
void TestChatFormat::templateDefaultsAreWritten() {
    const std::string qwen2 =
        R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
    const ChatTemplateDefaults q = chatTemplateDefaults(qwen2, ChatFormat::ChatMl, "05 Dec 2026");
    QCOMPARE(QString::fromStdString(q.defaultSystem), QString("You are a helpful assistant."));
    QCOMPARE(QString::fromStdString(renderChat(ChatFormat::ChatMl, {{"user", "Hi"}}, "<s>", "</s>", q)),
             QString("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                     "<|im_start|>assistant\n"));
    QCOMPARE(QString::fromStdString(renderChat(ChatFormat::ChatMl, {{"system", "S"}, {"user", "Hi"}}, "<s>", "</s>", q)),
             QString("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    // Qwen2.5: a tools branch first (its own system turn, not the default), then the default in an else; the caller's
    // system message is an expression. Qwen2.5-Math's default holds braces and an escaped backslash.
    const std::string qwen25 =
        R"({%- if tools %}{{- '<|im_start|>system\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }})"
        R"({%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %})"
        R"({{- "\n\n# Tools\n<tools>" }}{{- "\n</tools><|im_end|>\n" }}{%- else %}{%- if messages[0]['role'] == 'system' %})"
        R"({{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %})"
        R"({{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }})"
        R"({%- endif %}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %})";
    QCOMPARE(QString::fromStdString(chatTemplateDefaults(qwen25, ChatFormat::ChatMl, "").defaultSystem),
             QString("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
    const std::string qwen25Math =
        R"({%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %})"
        R"({{- '<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n' }}{%- endif %})";
    QCOMPARE(QString::fromStdString(chatTemplateDefaults(qwen25Math, ChatFormat::ChatMl, "").defaultSystem),
             QString("Please reason step by step, and put your final answer within \\boxed{}."));
    // A real newline in the literal; and a fixed system turn written only when tools are given is no default.
    QCOMPARE(QString::fromStdString(chatTemplateDefaults("{% if messages[0]['role'] != 'system' %}{{ \"<|im_start|>system\nBe kind.<|im_end|>\n\" }}{% endif %}",
                                                         ChatFormat::ChatMl, "").defaultSystem),
             QString("Be kind."));
    QVERIFY(chatTemplateDefaults("{% if tools %}{{ '<|im_start|>system\\nUse the tools.<|im_end|>\\n' }}{% endif %}", ChatFormat::ChatMl, "")
                .defaultSystem.empty());
    // A template that writes the caller's system message only (an expression, not a literal) has no default.
    QVERIFY(chatTemplateDefaults(chatMlVocabulary().chatTemplate, ChatFormat::ChatMl, "").defaultSystem.empty());
    QVERIFY(chatTemplateDefaults(R"({{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }})", ChatFormat::ChatMl, "")
                .defaultSystem.empty());

    // Llama 3.1: a system turn always, dated by the template's own default.
    const std::string llama31 =
        R"({{- bos_token }}{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %})"
        R"({%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set system_message = "" %}{%- endif %})"
        R"({{- "<|start_header_id|>system<|end_header_id|>\n\n" }}{{- "Cutting Knowledge Date: December 2023\n" }}{{- "Today Date: " + date_string + "\n\n" }})"
        R"({{- system_message }}{{- "<|eot_id|>" }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %})";
    QCOMPARE(detectChatFormat(llama31), ChatFormat::Llama3);
    const ChatTemplateDefaults l = chatTemplateDefaults(llama31, ChatFormat::Llama3, "05 Dec 2026");
    QCOMPARE(QString::fromStdString(l.systemPreamble), QString("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"));
    QCOMPARE(QString::fromStdString(renderChat(ChatFormat::Llama3, {{"user", "Hi"}}, "<s>", "</s>", l)),
             QString("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
                     "2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
                     "<|end_header_id|>\n\n"));
    QCOMPARE(QString::fromStdString(renderChat(ChatFormat::Llama3, {{"system", " Be brief. "}, {"user", "Hi"}}, "<s>", "</s>", l)),
             QString("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
                     "2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>"
                     "assistant<|end_header_id|>\n\n"));
    // Llama 3.2 dates it with strftime_now, which transformers provides: today.
    std::string llama32 = llama31;
    llama32.replace(llama32.find("{%- if not date_string"), 0,
                    R"({%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %})");
    QCOMPARE(QString::fromStdString(chatTemplateDefaults(llama32, ChatFormat::Llama3, "05 Dec 2026").systemPreamble),
             QString("Cutting Knowledge Date: December 2023\nToday Date: 05 Dec 2026\n\n"));
    QVERIFY(QRegularExpression("^\\d\\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \\d{4}$")
                .match(QString::fromStdString(chatTemplateToday())).hasMatch());
    // Llama 3's first template has no preamble; nor does another format.
    QVERIFY(chatTemplateDefaults("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", ChatFormat::Llama3, "x")
                .systemPreamble.empty());
    QVERIFY(chatTemplateDefaults(llama31, ChatFormat::ChatMl, "x").defaultSystem.empty());

    // prepareChatPrompt applies the tokenizer's template defaults.
    TokenizerData qwen = chatMlVocabulary();
    qwen.chatTemplate = qwen2;
    const ChatPrompt prompt = prepareChatPrompt(*makeTokenizer(qwen), {{"user", "x"}});
    QCOMPARE(QString::fromStdString(prompt.text),
             QString("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"));
}

void TestChatFormat::spmParsesControlTokensOnlyWhenAsked() {
    CWB_REQUIRE_FIXTURE(path, "models/llama-2-tiny-random.gguf");
    auto model = loadModel(path.toStdString());
    const Tokenizer& tok = *model->tokenizer;
    const std::string text = "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello there [/INST] Hi! </s><s>[INST] And you? [/INST]";
    // Ids from transformers 5.25's AutoTokenizer (which parses special tokens) on the tokenizer.json cwb exports from
    // this GGUF, add_special_tokens=True.
    const std::vector<TokenId> expected = {1, 518, 25580, 29962, 3532, 14816, 29903, 6778, 13, 3629, 11473, 29889, 13,
                                           29966, 829, 14816, 29903, 6778, 13, 13, 10994, 727, 518, 29914, 25580, 29962,
                                           6324, 29991, 29871, 2, 1, 518, 25580, 29962, 1126, 366, 29973, 518, 29914,
                                           25580, 29962};
    QCOMPARE(tok.encodeWithSpecialTokens(text, true), expected);
    QCOMPARE(tok.encodeWithSpecialTokens("a</s>b", true), (std::vector<TokenId>{1, 263, 2, 289}));
    // Without asking, "</s>" written in the text is text, as in llama.cpp without parse_special.
    const std::vector<TokenId> plain = tok.encode("a</s>b", true);
    QVERIFY(std::find(plain.begin(), plain.end(), TokenId(2)) == plain.end());
    QVERIFY(plain.size() > 4);
}

void TestChatFormat::stopIdsTravelThroughGgufAndHf() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    auto model = loadModel(path.toStdString());
    TokenizerData data = *model->tokenizer->vocabulary();
    data.stopIds = {13, 400};   // two ids besides EOS: GGUF holds them as eot and eom
    data.tokens[400] = "<|eom_id|>";
    model->tokenizer = makeTokenizer(data);
    QCOMPARE(model->tokenizer->stopIds(), (std::vector<TokenId>{2, 13, 400}));
    QTemporaryDir dir;

    const std::string gguf = (dir.path() + "/stops.gguf").toStdString();
    exportModel(*model, "gguf", gguf, {});
    QCOMPARE(loadModel(gguf)->tokenizer->stopIds(), (std::vector<TokenId>{2, 13, 400}));

    const std::string hf = (dir.path() + "/stops-hf").toStdString();
    exportModel(*model, "hf", hf, {});
    const auto generation = nlohmann::json::parse(std::ifstream(hf + "/generation_config.json"));
    QCOMPARE(generation["eos_token_id"], nlohmann::json({2, 13, 400}));
    const auto config = nlohmann::json::parse(std::ifstream(hf + "/config.json"));
    QCOMPARE(config["eos_token_id"], nlohmann::json({2, 13, 400}));   // the list, not its first id (user probe)
    QCOMPARE(loadModel(hf)->tokenizer->stopIds(), (std::vector<TokenId>{2, 13, 400}));

    // generation_config.json entries that are not ids in the vocabulary are passed over; a file that is not JSON
    // leaves the model loadable with EOS alone.
    std::ofstream(hf + "/generation_config.json") << R"({"eos_token_id": [2, "x", 99999, -1, 13]})";
    QCOMPARE(loadModel(hf)->tokenizer->stopIds(), (std::vector<TokenId>{2, 13}));
    std::ofstream(hf + "/generation_config.json") << "{ not json";
    QCOMPARE(loadModel(hf)->tokenizer->stopIds(), (std::vector<TokenId>{2}));
}

void TestChatFormat::generationEndsAtStopIds() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    auto model = loadModel(path.toStdString());
    Transformer rt(*model);
    GenerateParams p;
    p.tokens = 40;
    // Greedy from BOS gives 403 407 261 378 432 … (the fixtures README): a stop id ends it where it appears.
    p.stopIds = {378};
    GenerateResult r = generate(rt, *model->tokenizer, p);
    QCOMPARE(r.generatedIds, (std::vector<TokenId>{403, 407, 261, 378}));
    QVERIFY(r.stopped);
    // The vocabulary's own stop ids end it too, and --no-stop (stopAtEos false) ignores both.
    TokenizerData data = *model->tokenizer->vocabulary();
    data.stopIds = {261};
    auto withStops = makeTokenizer(data);
    p.stopIds.clear();
    r = generate(rt, *withStops, p);
    QCOMPARE(r.generatedIds, (std::vector<TokenId>{403, 407, 261}));
    p.stopAtEos = false;
    p.stopIds = {378};
    r = generate(rt, *withStops, p);
    QCOMPARE(int(r.generatedIds.size()), 40);
    QVERIFY(!r.stopped);
}

QTEST_APPLESS_MAIN(TestChatFormat)
#include "test_chat_format.moc"
