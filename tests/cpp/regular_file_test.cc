// Files that are not regular files: ReadableFile refuses a FIFO, a folder, a device and a socket
// by name without blocking, and load_model passes that on as a typed error. Saving refuses an
// external data location that would replace the model file or leave the model's folder.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"
#include "tether/error.h"
#include "tether/onnx.h"
#include "util/regular_file.h"

namespace {

using namespace tether::ir;
using tether::util::ReadableFile;
using tether_test::TempDir;
namespace fs = std::filesystem;

void expect_refused(const std::string& path, const std::string& kind) {
  ReadableFile f(path);
  EXPECT_FALSE(f.ok()) << path;
  EXPECT_TRUE(f.not_regular()) << path;
  EXPECT_FALSE(f.missing()) << path;
  EXPECT_EQ(f.error(), "'" + path + "' is " + kind + ", not a regular file");
}

TEST(RegularFile, FifoFolderDeviceAndSocketAreRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(fifo, "a FIFO");  // no writer: a blocking open would never return
  expect_refused(dir.path().string(), "a directory");
  expect_refused("/dev/null", "a character device");
  fs::create_symlink(fifo, dir.file("to_fifo"));
  expect_refused(dir.file("to_fifo"), "a FIFO");

  // A socket's path must fit in sun_path; the temp folder's is short.
  const std::string sock = dir.file("s");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  expect_refused(sock, "a socket");
  ::close(fd);
}

TEST(RegularFile, ARegularFileAndALinkToOneAreReadInFull) {
  TempDir dir;
  tether_test::write_file(dir.file("a.bin"), "0123456789");
  fs::create_symlink("a.bin", dir.file("link"));
  for (const std::string& path : {dir.file("a.bin"), dir.file("link")}) {
    ReadableFile f(path);
    ASSERT_TRUE(f.ok()) << f.error();
    EXPECT_EQ(f.size(), 10);
    std::string got(4, '\0');
    ASSERT_TRUE(f.read_at(got.data(), 4, 3));
    EXPECT_EQ(got, "3456");
    EXPECT_FALSE(f.read_at(got.data(), 4, 8));  // past the end: refused, not short
  }
  ReadableFile missing(dir.file("none"));
  EXPECT_TRUE(missing.missing());
  EXPECT_EQ(missing.error(), "'" + dir.file("none") + "': no such file");
}

TEST(RegularFile, LoadingAFifoIsAModelErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.file("m.onnx");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    load_model(path);
    FAIL() << "a FIFO loaded";
  } catch (const tether::ModelError& e) {
    EXPECT_EQ(std::string(e.what()), "'" + path + "' is a FIFO, not a regular file");
  }
}

Model model_with_weights() {
  Model m;
  m.ir_version = 10;
  m.set_opset("", 18);
  Graph& g = m.graph();
  std::vector<float> w(1024);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape({Dim(1024)})));
  Value* wv = g.add_initializer(
      Tensor::copy_of(DType::kFloat32, {1024}, w.data(), static_cast<int64_t>(w.size() * sizeof(float))), "w");
  g.add_output(g.add_node("Add", {x, wv}, {"y"}, "add")->output(0));
  return m;
}

TEST(RegularFile, SaveRefusesADataLocationThatIsTheModelFileAndWritesNothing) {
  TempDir dir;
  const std::string path = dir.file("m.onnx");
  save_model(model_with_weights(), path);
  const std::string before = tether_test::read_file(path);
  const Model loaded = load_model(path);
  for (const char* location : {"m.onnx", "./m.onnx"}) {
    SaveOptions opts;
    opts.external_data = ExternalData::kAlways;
    opts.location = location;
    EXPECT_THROW(save_model(loaded, path, opts), tether::ArgumentError) << location;
  }
  EXPECT_EQ(tether_test::list_dir(dir.path()), (std::vector<std::string>{"m.onnx"}));
  EXPECT_EQ(tether_test::read_file(path), before);
}

TEST(RegularFile, SaveRefusesADataFolderThatLeadsOutThroughALink) {
  TempDir dir;
  fs::create_directories(dir.path() / "d");
  fs::create_directories(dir.path() / "outside");
  fs::create_directory_symlink(dir.path() / "outside", dir.path() / "d" / "link");
  SaveOptions opts;
  opts.external_data = ExternalData::kAlways;
  opts.location = "link/w.bin";
  EXPECT_THROW(save_model(model_with_weights(), dir.file("d/m.onnx"), opts), tether::ArgumentError);
  EXPECT_TRUE(tether_test::list_dir(dir.path() / "outside").empty());
  EXPECT_EQ(tether_test::list_dir(dir.path() / "d"), (std::vector<std::string>{"link"}));
}

}  // namespace
