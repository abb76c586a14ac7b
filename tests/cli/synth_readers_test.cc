// Every synth preset writes what files converted from the real model carry,
// so other GGUF readers take it: rope.scaling.type only with a value
// llama.cpp defines (it asserts on others, such as "llama3": Llama 3.1+
// files carry rope_freqs.weight instead), and the file parses in Python's
// gguf reader where one is installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "run_cli.h"

namespace rotor::testing {
namespace {

bool PythonGgufInstalled() { return std::system("python3 -c 'import gguf' > /dev/null 2>&1") == 0; }

const std::vector<std::string> kPresets = {"stories15m",  "stories110m",  "smollm2-135m",
                                           "llama3.2-1b", "qwen2.5-0.5b", "qwen2-tiny",
                                           "llama3-tiny"};

// One small layer keeps the file small; the keys and tensor names are the preset's.
std::string Synth(const TempDir& dir, const std::string& preset) {
  const std::string path = dir.File(preset + ".gguf");
  const CliResult r =
      RunRotor({"synth", "--shape",      preset,       "--layers",   "1", "--dim",  "256",  "--ffn",
                "256",   "--heads",      "4",          "--kv-heads", "2", "--type", "q8_0", "-o",
                path,    "--vocab-file", LlamaVocab(), "-t",         "2"});
  EXPECT_EQ(r.exit_code, 0) << preset << ": " << r.err;
  return path;
}

TEST(SynthReadersTest, EveryPresetCarriesWhatConvertedFilesDo) {
  TempDir dir;
  for (const std::string& preset : kPresets) {
    const std::string path = Synth(dir, preset);
    auto f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.message();
    const std::string arch = *(*f)->GetString("general.architecture");
    const std::string key = arch + ".rope.scaling.type";
    if ((*f)->Has(key)) {
      const std::string type = *(*f)->GetString(key);
      EXPECT_THAT(type, ::testing::AnyOf("none", "linear", "yarn", "longrope"))
          << preset << ": llama.cpp refuses rope.scaling.type " << type;
    }
    if (preset.starts_with("llama3")) {
      EXPECT_NE((*f)->FindTensor("rope_freqs.weight"), nullptr) << preset;
      EXPECT_FALSE((*f)->Has(key)) << preset;
    }
    // The project's independent standard-library checker (tests/quantize/gguf_check.py)
    // parses the layout: header, metadata, tensor offsets, sizes and alignment.
    if (std::system("command -v python3 > /dev/null 2>&1") == 0) {
      const std::string check = "python3 '" + std::string(ROTOR_SOURCE_DIR) +
                                "/tests/quantize/gguf_check.py' '" + path + "' > /dev/null";
      EXPECT_EQ(std::system(check.c_str()), 0) << preset << ": gguf_check.py refused it";
    }
    // It generates (rotor's loader takes rope_freqs.weight).
    const CliResult gen =
        RunRotor({"generate", "-m", path, "-p", "Hi", "-n", "4", "--temp", "0", "-t", "2"});
    EXPECT_EQ(gen.exit_code, 0) << preset << ": " << gen.err;
  }
}

TEST(SynthReadersTest, EveryPresetLoadsInPythonsGgufReader) {
  if (!PythonGgufInstalled())
    GTEST_SKIP() << "no other GGUF reader is installed or installable here: Debian bookworm has "
                    "no python3-gguf package (apt-cache policy python3-gguf finds none)";
  TempDir dir;
  for (const std::string& preset : kPresets) {
    const std::string path = Synth(dir, preset);
    const std::string cmd =
        "python3 -c 'import gguf, sys; r = gguf.GGUFReader(sys.argv[1]); "
        "assert len(r.tensors) > 0' '" +
        path + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << preset << ": python gguf could not read it";
  }
}

}  // namespace
}  // namespace rotor::testing
