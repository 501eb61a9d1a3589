// The torture tester's one table of fault kinds (torture/faults.h): every kind once, each name
// found back, and the lists made from it naming them all.
#include "torture/faults.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "torture/orchestrator.h"

namespace fencelock::torture {
namespace {

TEST(TortureFaults, EveryKindHasOneEntryAndItsNameFindsIt) {
  std::set<Fault> kinds;
  std::set<std::string_view> names;
  for (const FaultSpec& spec : fault_specs()) {
    EXPECT_TRUE(kinds.insert(spec.fault).second) << spec.name;
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
    ASSERT_EQ(find_fault(spec.name), &spec);
    EXPECT_EQ(fault_name(spec.fault), spec.name);
    EXPECT_TRUE(is_fault(spec.name, spec.fault));
    EXPECT_TRUE(known_fault(std::string(spec.name)));
    EXPECT_NE(fault_names().find(spec.name), std::string::npos);
    EXPECT_NE(fault_help().find(spec.name), std::string::npos);
  }
  EXPECT_EQ(kinds.size(), static_cast<std::size_t>(Fault::kFailover) + 1);
  EXPECT_EQ(find_fault("pauses"), nullptr);
  EXPECT_FALSE(known_fault(""));
  EXPECT_FALSE(is_fault("kill", Fault::kServerKill));
}

TEST(TortureFaults, WhatEachKindNeedsIsStatedOnce) {
  // A few kinds whose needs the orchestrator relies on.
  EXPECT_TRUE(find_fault("delay-one")->through_proxy);
  EXPECT_FALSE(find_fault("pause")->through_proxy);
  EXPECT_TRUE(find_fault("minority-stall")->server_control);
  EXPECT_TRUE(find_fault("admin-delete")->server_control);
  EXPECT_FALSE(find_fault("admin-delete")->on_servers);
  EXPECT_TRUE(find_fault("jump")->clock);
  EXPECT_FALSE(find_fault("many-leases")->scheduled);
  EXPECT_TRUE(find_fault("server-kill")->cuts_every_session);
  EXPECT_FALSE(find_fault("minority-stall")->cuts_every_session);
  // The help says which kinds need the control program.
  EXPECT_NE(fault_help().find("evict (memory pressure on Redis: PROGRAM fill PORT; "
                              "--server-control)"),
            std::string::npos)
      << fault_help();
}

}  // namespace
}  // namespace fencelock::torture
