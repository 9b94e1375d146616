// Writes the seed corpus of fuzz_channel_setup: the genuine set-up both ways, and one
// change of each kind (among them the one-byte operation size of issue 18).
#include <fstream>
#include <iostream>
#include <string>

#include "channel_setup_input.h"

int main(int argc, char** argv) {
  using namespace tensorverbs::fuzzing;
  if (argc != 2) {
    std::cerr << "usage: seed_channel_setup DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  const auto write = [&dir](const std::string& name, const ChannelSetupInput& in) {
    std::ofstream(dir + "/" + name, std::ios::binary) << in.write();
  };
  ChannelSetupInput in;
  in.tensor_bytes = 300 << 10;
  write("genuine-answered", in);
  in.flags = kOffered;
  in.task_slots = 1;
  write("genuine-offered", in);
  in.flags = kSetMaxMessage;
  in.max_message_bytes = 1;
  write("one-byte-operations", in);
  in.max_message_bytes = 64 << 10;
  write("smallest-operations", in);
  in.flags = kSetSlots | kSetRxLength | kOffered;
  in.slots = 1024;
  in.rx_length = ~0ull;
  write("slots-and-length", in);
  in.flags = kMoveRx;
  in.rx_shift = 8192;
  write("moved-buffer", in);
  in.flags = kFlipRkey;
  in.rkey_flip = 1;
  write("wrong-key", in);
  in.flags = kCutEndpoint | kOffered;
  in.endpoint_keep = 7;
  write("cut-endpoint", in);
  in.flags = kRaw;
  in.raw = "TVCH";
  write("raw", in);
  return 0;
}
