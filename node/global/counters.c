/* counters: libgossip's and the replica's counter tables (see counters.h). */
#include "counters.h"

#include "gossip/gossip.h"
#include "replica.h"

#define G(field, info, metric, kind, help)                                                         \
    COUNTER_ROW(struct gossip_stats, field, info, metric, kind, help)

static const struct counter_row counters__gossip[] = {
    G(packets_sent, "gossip_packets_sent", "gossip_packets_sent_total", COUNTER_TOTAL,
      "Gossip packets sent."),
    G(bytes_sent, "gossip_bytes_sent", "gossip_bytes_sent_total", COUNTER_TOTAL,
      "Gossip bytes sent."),
    G(packets_received, "gossip_packets_received", "gossip_packets_received_total", COUNTER_TOTAL,
      "Gossip packets received."),
    G(bytes_received, "gossip_bytes_received", "gossip_bytes_received_total", COUNTER_TOTAL,
      "Gossip bytes received."),
    G(send_errors, "gossip_send_errors", "gossip_send_errors_total", COUNTER_TOTAL,
      "Gossip packets the socket refused to send."),
    G(direct_sent, "gossip_direct_sent", "gossip_direct_sent_total", COUNTER_TOTAL,
      "Direct messages (reports, leases) sent."),
    G(direct_received, "gossip_direct_received", "gossip_direct_received_total", COUNTER_TOTAL,
      "Direct messages received."),
    G(direct_dropped, "gossip_direct_dropped", "gossip_direct_dropped_total", COUNTER_TOTAL,
      "Direct messages dropped (no route to the member, or malformed)."),
    G(probe_failures, "gossip_probe_failures", "gossip_probe_failures_total", COUNTER_TOTAL,
      "Failure-detector probes that went unanswered."),
    G(probes, "gossip_probes", "gossip_probes_total", COUNTER_TOTAL,
      "Failure-detector probes sent."),
    G(probe_fail_streak, "gossip_probe_fail_streak", "gossip_probe_fail_streak", COUNTER_GAUGE,
      "Probes that failed in a row since the last one answered."),
    G(indirect_probes, "gossip_indirect_probes", "gossip_indirect_probes_total", COUNTER_TOTAL,
      "Indirect probes asked of other members after a direct probe went unanswered."),
    G(nacks_received, "gossip_nacks_received", "gossip_nacks_received_total", COUNTER_TOTAL,
      "Nacks from members asked to probe indirectly (they are up, the target did not answer)."),
    G(suspicions, "gossip_suspicions", "gossip_suspicions_total", COUNTER_TOTAL,
      "Members this node suspected."),
    G(refutations, "gossip_refutations", "gossip_refutations_total", COUNTER_TOTAL,
      "Suspicions or deaths of this node it refuted (each raises its incarnation)."),
    G(deaths, "gossip_deaths", "gossip_deaths_total", COUNTER_TOTAL,
      "Members this node marked dead (its own verdict or one it accepted)."),
    G(deaths_doubted, "gossip_deaths_doubted", "gossip_deaths_doubted_total", COUNTER_TOTAL,
      "Deaths declared elsewhere of a member this node still reached, taken as suspicions."),
    G(leaves, "gossip_leaves", "gossip_leaves_total", COUNTER_TOTAL,
      "Members this node saw leave gracefully."),
    G(conflicts, "gossip_name_conflicts", "gossip_name_conflicts_total", COUNTER_TOTAL,
      "Other processes seen claiming this node's name (refused duplicates)."),
    G(member_msgs_dropped, "gossip_member_msgs_dropped", "gossip_member_msgs_dropped_total",
      COUNTER_TOTAL, "Membership messages dropped from a full send queue."),
    G(health, "health_score", "gossip_health_score", COUNTER_GAUGE,
      "Lifeguard's local health score: 0 is healthy, higher slows this node's probing."),
    G(pushpulls, "gossip_pushpulls", "gossip_pushpulls_total", COUNTER_TOTAL,
      "Anti-entropy state exchanges."),
};

#undef G

const struct counter_table counters_gossip = COUNTER_TABLE(counters__gossip);

#define R(field, info, metric, kind, help)                                                         \
    COUNTER_ROW(struct replica_stats, field, info, metric, kind, help)

static const struct counter_row counters__replica[] = {
    R(keys, "global_keys", "global_keys", COUNTER_GAUGE, "Global keys this node serves."),
    R(decisions, "global_decisions", "global_decisions_total", COUNTER_TOTAL,
      "Rate-limit decisions answered on global keys."),
    R(limited, "global_limited", "global_limited_total", COUNTER_TOTAL,
      "Decisions on global keys that refused the request."),
    R(young_denials, "young_denials", "young_denials_total", COUNTER_TOTAL,
      "Global refusals while this node was young (recovering the cluster's state)."),
    R(free_admits, "free_admits", "free_admits_total", COUNTER_TOTAL,
      "Global requests admitted on free units (the cluster's credit)."),
    R(chance_refusals, "chance_refusals", "chance_refusals_total", COUNTER_TOTAL,
      "Requests for thin global keys refused by the odds of their lease or notice."),
    R(prompt_reports, "prompt_reports", "prompt_reports_total", COUNTER_TOTAL,
      "Key reports sent at once (out of units, far from the limit) rather than at the next tick."),
    R(notices_sent, "notices_sent", "notices_sent_total", COUNTER_TOTAL,
      "Thin-key notices sent as an owner to nodes that do not report the key."),
    R(notices_received, "notices_received", "notices_received_total", COUNTER_TOTAL,
      "Thin-key notices received from owners."),
    R(owned_keys, "owned_keys", "owned_keys", COUNTER_GAUGE,
      "Global keys this node aggregates as their owner."),
    R(owned_reporters, "owned_reporters", "owned_reporters", COUNTER_GAUGE,
      "Reporting nodes over the keys this node owns."),
    R(reports_sent, "reports_sent", "reports_sent_total", COUNTER_TOTAL,
      "Report messages sent to owners (each holds many keys)."),
    R(report_entries_sent, "report_entries_sent", "report_entries_sent_total", COUNTER_TOTAL,
      "Key reports sent to owners."),
    R(report_bytes_sent, "report_bytes_sent", "report_bytes_sent_total", COUNTER_TOTAL,
      "Bytes of report messages sent."),
    R(reports_received, "reports_received", "reports_received_total", COUNTER_TOTAL,
      "Report messages received as an owner."),
    R(report_entries_received, "report_entries_received", "report_entries_received_total",
      COUNTER_TOTAL, "Key reports received as an owner."),
    R(leases_sent, "leases_sent", "leases_sent_total", COUNTER_TOTAL,
      "Lease messages sent as an owner (each holds many keys)."),
    R(lease_entries_sent, "lease_entries_sent", "lease_entries_sent_total", COUNTER_TOTAL,
      "Key leases sent as an owner."),
    R(lease_bytes_sent, "lease_bytes_sent", "lease_bytes_sent_total", COUNTER_TOTAL,
      "Bytes of lease messages sent."),
    R(leases_received, "leases_received", "leases_received_total", COUNTER_TOTAL,
      "Lease messages received from owners."),
    R(lease_entries_received, "lease_entries_received", "lease_entries_received_total",
      COUNTER_TOTAL, "Key leases received from owners."),
    R(bytes_received, "replication_bytes_received", "replication_bytes_received_total",
      COUNTER_TOTAL, "Bytes of reports and leases received."),
    R(send_errors, "replication_send_errors", "replication_send_errors_total", COUNTER_TOTAL,
      "Reports and leases the transport refused."),
    R(stale_leases, "stale_leases", "stale_leases_total", COUNTER_TOTAL,
      "Leases dropped as meant for an older life or an old owner."),
    R(bare_unknown, "reports_without_limit_unknown", "reports_without_limit_unknown_total",
      COUNTER_TOTAL,
      "Reports that left the limit out for a key this owner does not hold (the sender "
      "sends it again)."),
    R(debt_events, "debt_events", "debt_events_total", COUNTER_TOTAL,
      "Global admissions that took a node's bucket into debt."),
    R(gc_keys, "gc_keys", "global_keys_reclaimed_total", COUNTER_TOTAL,
      "Idle global keys dropped by this node."),
    R(owned_gc, "owned_gc", "owned_keys_reclaimed_total", COUNTER_TOTAL,
      "Owner records dropped with no live reporter."),
    R(view_changes, "view_changes", "view_changes_total", COUNTER_TOTAL,
      "Member views the replica was given."),
    R(bad_packets, "bad_replication_packets", "bad_replication_packets_total", COUNTER_TOTAL,
      "Replication messages dropped as malformed or of another wire version."),
    R(refused_full, "refused_full", "global_refused_full_total", COUNTER_TOTAL,
      "New global keys refused because --max-keys global keys were held."),
    R(evicted, "global_evicted", "global_keys_evicted_total", COUNTER_TOTAL,
      "Global keys evicted to make room (--on-full evict)."),
};

#undef R

const struct counter_table counters_replica = COUNTER_TABLE(counters__replica);
