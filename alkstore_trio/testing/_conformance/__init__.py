"""The conformance suite: the queue contract (rules Q1-Q13, Q16) as checks any engine must pass.

Why a suite of plain async functions rather than a pytest module: the contract binds every
engine, including engines written outside this repository, so the checks must run anywhere
an :class:`~alkstore_trio.testing.EngineHarness` can be built, with nothing but trio. Each
check opens a fresh store through the harness, drives *only* the public API, moves time
only through ``harness.advance`` and reads it only through ``harness.now`` (it never sleeps
and never assumes a start time), and fails with a plain :class:`AssertionError` whose
message says what the contract expected and what the engine did.

Each check is named after the rule it pins (``q4_heartbeat_is_an_absolute_reset``), so the
coverage of the contract can be read off the names. :data:`CONFORMANCE_CHECKS` lists them;
:func:`check_conformance` runs them and reports every failure at once, the way
:func:`trio.testing.check_one_way_stream` checks a stream implementation.

Where the contract is silent, the checks follow ``docs/dev/decisions-foundation.md``
(their docstrings say so).

Layout: one module per rule group, named after the ids of the rules it checks and their
subject (``q3_claim.py``, ``q4_settle.py``, ``d24_redrive.py``, ``d25_d29_purge.py``), so
a rule's checks are found from its id alone; ``_helpers.py`` holds what they share (the
contract's constants, the job field lists, small assertions). This module only lists the
checks in contract order and runs them. ``tests/conformance/test_suite_layout.py`` keeps
every check in the module of its rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._helpers import Check, _leaves
from .d22_d23_stats import (
    d22_stats_counts_each_queue_by_state_at_one_instant,
    d23_ids_issued_minus_live_and_dead_counts_the_rows_gone,
)
from .d24_redrive import (
    d24_requeue_dead_all_redrives_every_dead_row_of_the_queue_only,
    d24_requeue_dead_moves_listed_dead_rows_back_to_pending_with_attempts_reset,
    d24_requeue_dead_rejects_bad_arguments_without_effect,
    d24_requeue_dead_restarts_the_time_to_live,
)
from .d25_d29_purge import (
    d25_1_purge_dead_by_ids_deletes_only_those_dead_rows,
    d25_purge_dead_deletes_dead_rows_older_than_the_limit,
    d29_purge_dead_dry_run_counts_what_purge_would_delete_and_deletes_nothing,
)
from .d26_1_filters import (  # D26.1
    d26_1_a_header_scan_stops_after_its_bound_and_says_where,
    d26_1_bad_filters_raise_before_any_read,
    d26_1_find_jobs_by_header_matches_one_value_exactly,
    d26_1_find_jobs_by_key_matches_either_key_exactly,
)
from .d26_operator_reads import (
    d26_list_jobs_pages_through_one_state_by_id,
    d26_store_get_job_finds_a_row_by_id_in_any_queue,
)
from .d27_counters import (
    d27_stats_count_each_queues_acked_jobs,
    d27_stats_count_each_queues_cancelled_jobs,
    d27_stats_count_each_queues_dead_letter_moves,
    d27_stats_list_queues_with_counted_jobs_even_without_rows,
)
from .d30_headers import (
    d30_every_way_to_enqueue_takes_headers,
    d30_headers_are_kept_for_the_jobs_whole_life,
    d30_headers_are_validated_without_effect,
)
from .q1_queues import (
    q1_queue_handle_carries_its_opts_and_defaults,
    q1_queue_names_accept_1_to_63_allowed_characters,
    q1_queue_names_reject_invalid_and_reserved_names,
    q1_queue_opts_accept_boundary_values,
    q1_queue_opts_reject_invalid_values,
    q1_rows_keep_the_stamps_of_the_handle_that_enqueued_them,
)
from .q2_enqueue import (
    q2_1_negative_delay_means_now,
    q2_delay_wins_over_run_at,
    q2_enqueue_many_is_atomic_with_one_clock_read,
    q2_enqueue_rejects_invalid_options_without_effect,
    q2_enqueue_wakes_its_queue,
    q2_enqueue_without_delay_or_run_at_is_ready_now,
    q2_expires_at_is_relative_to_enqueue_time,
    q2_ids_increase_in_enqueue_order,
    q2_max_attempts_override_is_the_only_per_job_stamp,
    q2_payload_must_be_bytes_within_the_maximum_size,
    q2_payload_round_trips_byte_for_byte,
    q2_priority_accepts_the_int32_range,
    q2_run_at_is_stored_as_given,
    q2_run_at_must_be_timezone_aware,
)
from .q3_claim import (
    q3_claim_batch_n_must_be_an_int,
    q3_claim_batch_takes_the_best_n,
    q3_claim_batch_with_n_at_most_zero_has_no_effect,
    q3_claim_order_is_priority_then_run_at_then_id,
    q3_claim_sets_the_claim_fields,
    q3_concurrent_claims_hand_out_each_job_exactly_once,
    q3_delayed_rows_are_not_claimable_until_due,
    q3_expired_rows_are_never_claimed,
    q3_pre_claim_sweep_dead_letters_lapsed_claims_at_budget,
    q3_reclaim_after_the_deadline_consumes_an_attempt,
    q3_reclaimable_rows_take_their_place_in_the_order,
    q3_reclaimed_holder_is_refused_and_the_row_untouched,
    q3_worker_id_must_be_a_non_empty_str,
)
from .q4_settle import (
    q4_ack_deletes_the_row,
    q4_ack_retry_fail_are_one_shot,
    q4_claim_is_valid_at_the_deadline_instant,
    q4_claim_lapses_one_instant_after_the_deadline,
    q4_dead_letter_moves_are_atomic,
    q4_fail_dead_letters_now,
    q4_heartbeat_defaults_to_the_rows_visibility_timeout,
    q4_heartbeat_does_not_consume_the_handle,
    q4_heartbeat_is_an_absolute_reset,
    q4_heartbeat_rejects_invalid_extend,
    q4_late_heartbeat_is_refused,
    q4_retry_and_fail_reject_invalid_arguments_without_effect,
    q4_retry_at_budget_dead_letters,
    q4_retry_below_budget_with_an_explicit_delay,
)
from .q5_backoff import (
    q5_backoff_base_zero_retries_at_once,
    q5_backoff_below_one_second_waits_one_second,
    q5_backoff_delay_is_within_the_equal_jitter_range,
    q5_backoff_draws_come_from_the_injected_rng,
    q5_backoff_is_capped_at_one_hour,
)
from .q6_ack_batch import (
    q6_ack_batch_counts_a_claim_at_its_deadline_instant,
    q6_ack_batch_deletes_only_valid_claims_of_this_queue,
    q6_ack_batch_of_nothing_returns_zero,
)
from .q8_read import (
    q8_get_job_shows_every_field,
    q8_rows_of_other_queues_are_invisible,
    q8_run_at_given_in_another_zone_is_shown_in_utc,
    q8_timestamps_are_aware_utc,
)
from .q9_sweep import (
    q9_retention_is_that_of_the_sweeping_handle,
    q9_retention_none_keeps_dead_rows_forever,
    q9_retention_purges_dead_rows_after_the_retention,
    q9_retention_zero_purges_dead_rows_after_their_death_instant,
    q9_sweep_dead_letters_expired_pending_and_processing_rows,
    q9_sweep_is_scoped_to_its_queue,
)
from .q10_transactions import (
    q10_finished_transaction_is_consumed,
    q10_transaction_rolls_back_on_exception,
    q10_transaction_rows_appear_and_wake_only_after_commit,
    q10_transaction_stamps_handle_opts_or_the_defaults,
    q10_transaction_validates_arguments_without_effect,
)
from .q11_closed_store import (
    q11_a_blocked_wake_listener_wakes_up_with_store_closed,
    q11_a_transaction_open_at_close_raises_store_closed,
    q11_closing_twice_is_harmless,
    q11_every_operation_after_close_raises_store_closed,
    q11_leaving_the_store_block_closes_everything,
    q11_store_closed_is_reported_before_other_errors,
)
from .q12_errors import (
    q12_bad_input_has_no_partial_effect,
    q12_errors_form_one_hierarchy,
    q12_messages_name_the_parameter_and_the_value,
    q12_messages_never_contain_the_payload,
)
from .q13_ack_handles import (
    q13_ack_handles_acks_valid_claims_in_one_call_and_refuses_stale_ones,
    q13_ack_handles_and_claim_acks_valid_claims_then_claims_the_best_n,
    q13_ack_handles_and_claim_claims_after_the_acks_took_effect,
    q13_ack_handles_and_claim_rejects_bad_arguments_without_effect,
    q13_ack_handles_and_claim_runs_the_pre_claim_sweep_like_claim_batch,
    q13_ack_handles_rejects_foreign_consumed_and_duplicate_handles_without_effect,
)
from .q13_heartbeat_retry_fail_handles import (
    q13_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones,
    q13_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones,
    q13_retry_and_fail_handles_reject_bad_items_without_effect,
    q13_retry_handles_dead_letters_claims_on_their_last_attempt,
    q13_retry_handles_retries_valid_claims_and_refuses_stale_ones,
)
from .q15_unique import (
    q15_a_held_key_creates_nothing_and_returns_the_live_job,
    q15_a_transaction_holds_its_keys_until_it_ends,
    q15_a_window_refuses_the_key_after_its_job_is_gone,
    q15_concurrent_enqueues_of_one_key_create_one_job,
    q15_enqueue_many_carries_a_key_per_job,
    q15_redrive_skips_dead_jobs_whose_key_is_live,
    q15_the_key_frees_when_its_job_is_acked_cancelled_or_dead,
    q15_unique_keys_are_validated_without_effect,
)
from .q16_reschedule import (
    q16_a_rescheduled_job_is_claimed_at_its_new_time_and_place,
    q16_every_wake_of_a_delayed_job_says_when_it_is_due,
    q16_next_due_in_s_is_the_earliest_future_run_at_of_the_queue,
    q16_reschedule_changes_a_pending_jobs_run_at_and_priority,
    q16_reschedule_refuses_processing_dead_missing_and_other_queue_jobs,
    q16_reschedule_rejects_bad_arguments_without_effect,
    q16_reschedule_wakes_the_queue_with_the_new_due_time,
)
from .q17_periodic import (  # Q17
    q17_7_sub_hourly_cron_fires_at_every_real_instant_across_both_dst_changes,
    q17_a_changed_definition_wins_and_recomputes_the_next_fire_time,
    q17_bad_arguments_are_rejected_without_effect,
    q17_concurrent_calls_enqueue_each_fire_time_once,
    q17_cron_on_dst_days_fires_once,
    q17_each_fire_time_is_enqueued_once_on_the_engines_clock,
    q17_jobs_carry_the_schedule_and_fire_time_headers_and_stamps,
    q17_missed_fire_times_follow_catch_up,
    q17_undeclared_schedules_stop_firing_and_list_as_stale,
)
from .q17_periodic_delete import (  # Q17.10
    q17_10_a_schedule_still_declared_comes_back_as_a_new_row,
    q17_10_delete_periodic_deletes_one_row_and_keeps_its_jobs,
    q17_10_delete_periodic_rejects_a_bad_name_without_effect,
)
from .q18_limits import (
    q18_7_a_cancelling_job_holds_its_slot_until_settled_or_lapsed,
    q18_7_freed_slots_and_set_limits_wake_the_queue,
    q18_7_max_running_caps_the_live_leases_of_every_claim,
    q18_9_limits_combine_and_a_pause_still_wins,
    q18_9_the_rate_limit_is_a_token_bucket_on_the_engine_clock,
    q18_10_stats_show_limits_and_count_throttled_claims,
    q18_11_bad_limits_raise_and_change_nothing,
    q18_11_set_limits_merges_and_limits_reads_them,
)
from .q18_pause import (
    q18_a_claim_on_a_paused_queue_still_sweeps,
    q18_a_pause_leaves_enqueues_and_held_jobs_alone,
    q18_a_paused_queue_hands_out_no_job_until_resumed,
    q18_resume_wakes_the_queue_and_pause_does_not,
    q18_stats_show_the_paused_state,
)
from .q18_per_key import (
    q18_8_a_deep_backlog_does_not_starve_other_keys,
    q18_8_bad_concurrency_keys_raise_without_effect,
    q18_8_combines_with_max_running_and_counts_its_throttles,
    q18_8_max_running_per_key_caps_each_keys_live_leases,
    q18_8_next_due_waits_for_the_earliest_lease_of_the_full_keys,
    q18_8_the_concurrency_key_travels_with_the_job,
)
from .q19_1_results import (
    q19_1_a_kept_jobs_result_is_stored_with_its_ack,
    q19_1_a_stale_claims_result_is_refused_with_its_ack,
    q19_1_an_unkept_jobs_result_is_discarded,
    q19_1_bad_results_raise_without_effect,
    q19_1_results_go_with_the_fused_ack_of_a_limited_queue,
)
from .q19_2_q19_3_history import (
    q19_2_a_kept_job_is_readable_after_its_ack,
    q19_2_keep_completed_s_is_a_validated_stamp,
    q19_2_list_jobs_pages_the_completed_rows,
    q19_2_list_jobs_rejects_unknown_states,
    q19_2_unkept_jobs_are_deleted_and_ack_batch_keeps,
    q19_3_a_purge_larger_than_one_batch_completes,
    q19_3_sweeps_purge_kept_rows_after_their_time,
)
from .q19_4_wait import (
    q19_4_bad_arguments_raise_without_effect,
    q19_4_wait_is_cancellable_and_a_pure_read,
    q19_4_wait_is_woken_by_every_operation_that_finalizes,
    q19_4_wait_raises_job_gone_naming_keep_completed_s,
    q19_4_wait_returns_a_job_already_final_at_once,
)
from .q19_5_cancel import (
    q19_5_a_kept_job_recorded_cancelled_moves_to_history_as_cancelled,
    q19_5_a_lapsed_cancelling_row_is_finalized_by_cancel_or_the_sweep,
    q19_5_cancel_does_not_touch_dead_unknown_or_other_queue_rows,
    q19_5_cancel_finalizes_a_pending_row_at_once,
    q19_5_cancel_makes_a_processing_row_cancelling_and_refuses_its_holder,
    q19_5_settle_cancelled_finalizes_its_holders_claim_and_frees_the_key,
)
from .q19_6_tx_complete import (
    q19_6_a_rolled_back_completion_leaves_the_claim,
    q19_6_a_stale_claim_raises_claim_lost_and_nothing_commits,
    q19_6_bad_complete_arguments_raise_without_effect,
    q19_6_complete_commits_with_the_transactions_enqueues,
)
from .q19_7_progress import (
    q19_7_a_heartbeat_carries_progress_that_get_job_shows,
    q19_7_a_refused_heartbeat_stores_no_progress,
    q19_7_progress_is_kept_into_history_and_dead_rows,
    q19_7_progress_is_validated_without_effect,
)
from .q19_8_tokens import (
    q19_8_a_redriven_job_refuses_its_old_holders,
    q19_8_a_released_kept_job_is_pending_and_its_next_claim_keeps_it,
    q19_8_bad_release_arguments_raise_without_effect,
    q19_8_every_claim_of_a_job_gets_a_new_token,
    q19_8_release_gives_the_claims_attempt_back,
    q19_8_v_refuses_a_token_that_is_not_the_claims,
)
from .q21_workers import (  # Q21
    q21_a_silent_row_reads_gone_after_gone_after_s,
    q21_a_start_registers_a_running_row_on_the_engines_clock,
    q21_a_stop_marks_the_row_stopped_and_a_missing_row_stays_missing,
    q21_bad_arguments_are_rejected_without_effect,
    q21_beats_stamp_the_heartbeat_and_a_start_starts_afresh,
    q21_starts_and_beats_purge_rows_unheard_of_for_a_day_in_batches,
    q21_the_listing_puts_the_latest_beat_first_and_takes_limit,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._harness import EngineHarness

__all__ = ["CONFORMANCE_CHECKS", "check_conformance"]


#: Every check, in contract order, then the checks of decisions where the contract is
#: silent (``d22_...``: docs/dev/decisions-foundation.md). Their ``__name__`` is the
#: check's name.
CONFORMANCE_CHECKS: Final[tuple[Check, ...]] = (
    q1_queue_names_accept_1_to_63_allowed_characters,
    q1_queue_names_reject_invalid_and_reserved_names,
    q1_queue_handle_carries_its_opts_and_defaults,
    q1_queue_opts_reject_invalid_values,
    q1_queue_opts_accept_boundary_values,
    q1_rows_keep_the_stamps_of_the_handle_that_enqueued_them,
    q2_enqueue_without_delay_or_run_at_is_ready_now,
    q2_delay_wins_over_run_at,
    q2_1_negative_delay_means_now,
    q2_run_at_is_stored_as_given,
    q2_run_at_must_be_timezone_aware,
    q2_expires_at_is_relative_to_enqueue_time,
    q2_max_attempts_override_is_the_only_per_job_stamp,
    q2_payload_round_trips_byte_for_byte,
    q2_payload_must_be_bytes_within_the_maximum_size,
    q2_enqueue_rejects_invalid_options_without_effect,
    q2_priority_accepts_the_int32_range,
    q2_ids_increase_in_enqueue_order,
    q2_enqueue_many_is_atomic_with_one_clock_read,
    q2_enqueue_wakes_its_queue,
    q3_claim_order_is_priority_then_run_at_then_id,
    q3_reclaimable_rows_take_their_place_in_the_order,
    q3_claim_batch_takes_the_best_n,
    q3_claim_batch_with_n_at_most_zero_has_no_effect,
    q3_claim_batch_n_must_be_an_int,
    q3_worker_id_must_be_a_non_empty_str,
    q3_claim_sets_the_claim_fields,
    q3_delayed_rows_are_not_claimable_until_due,
    q3_expired_rows_are_never_claimed,
    q3_reclaim_after_the_deadline_consumes_an_attempt,
    q3_reclaimed_holder_is_refused_and_the_row_untouched,
    q3_pre_claim_sweep_dead_letters_lapsed_claims_at_budget,
    q3_concurrent_claims_hand_out_each_job_exactly_once,
    q4_heartbeat_is_an_absolute_reset,
    q4_heartbeat_defaults_to_the_rows_visibility_timeout,
    q4_heartbeat_rejects_invalid_extend,
    q4_late_heartbeat_is_refused,
    q4_claim_is_valid_at_the_deadline_instant,
    q4_claim_lapses_one_instant_after_the_deadline,
    q4_ack_deletes_the_row,
    q4_retry_at_budget_dead_letters,
    q4_retry_below_budget_with_an_explicit_delay,
    q4_retry_and_fail_reject_invalid_arguments_without_effect,
    q4_fail_dead_letters_now,
    q4_ack_retry_fail_are_one_shot,
    q4_heartbeat_does_not_consume_the_handle,
    q4_dead_letter_moves_are_atomic,
    q13_ack_handles_acks_valid_claims_in_one_call_and_refuses_stale_ones,
    q13_ack_handles_rejects_foreign_consumed_and_duplicate_handles_without_effect,
    q13_ack_handles_and_claim_acks_valid_claims_then_claims_the_best_n,
    q13_ack_handles_and_claim_claims_after_the_acks_took_effect,
    q13_ack_handles_and_claim_runs_the_pre_claim_sweep_like_claim_batch,
    q13_ack_handles_and_claim_rejects_bad_arguments_without_effect,
    q13_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones,
    q13_retry_handles_retries_valid_claims_and_refuses_stale_ones,
    q13_retry_handles_dead_letters_claims_on_their_last_attempt,
    q13_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones,
    q13_retry_and_fail_handles_reject_bad_items_without_effect,
    q5_backoff_delay_is_within_the_equal_jitter_range,
    q5_backoff_is_capped_at_one_hour,
    q5_backoff_base_zero_retries_at_once,
    q5_backoff_below_one_second_waits_one_second,
    q5_backoff_draws_come_from_the_injected_rng,
    q6_ack_batch_deletes_only_valid_claims_of_this_queue,
    q6_ack_batch_counts_a_claim_at_its_deadline_instant,
    q6_ack_batch_of_nothing_returns_zero,
    q19_5_cancel_finalizes_a_pending_row_at_once,
    q19_5_cancel_makes_a_processing_row_cancelling_and_refuses_its_holder,
    q19_5_settle_cancelled_finalizes_its_holders_claim_and_frees_the_key,
    q19_5_a_lapsed_cancelling_row_is_finalized_by_cancel_or_the_sweep,
    q19_5_cancel_does_not_touch_dead_unknown_or_other_queue_rows,
    q19_5_a_kept_job_recorded_cancelled_moves_to_history_as_cancelled,
    q8_get_job_shows_every_field,
    q8_rows_of_other_queues_are_invisible,
    q8_timestamps_are_aware_utc,
    q8_run_at_given_in_another_zone_is_shown_in_utc,
    q9_sweep_dead_letters_expired_pending_and_processing_rows,
    q9_retention_none_keeps_dead_rows_forever,
    q9_retention_zero_purges_dead_rows_after_their_death_instant,
    q9_retention_purges_dead_rows_after_the_retention,
    q9_sweep_is_scoped_to_its_queue,
    q9_retention_is_that_of_the_sweeping_handle,
    q10_transaction_rows_appear_and_wake_only_after_commit,
    q10_transaction_rolls_back_on_exception,
    q10_transaction_stamps_handle_opts_or_the_defaults,
    q10_transaction_validates_arguments_without_effect,
    q10_finished_transaction_is_consumed,
    q11_every_operation_after_close_raises_store_closed,
    q11_leaving_the_store_block_closes_everything,
    q11_a_transaction_open_at_close_raises_store_closed,
    q11_a_blocked_wake_listener_wakes_up_with_store_closed,
    q11_closing_twice_is_harmless,
    q11_store_closed_is_reported_before_other_errors,
    q12_errors_form_one_hierarchy,
    q12_messages_name_the_parameter_and_the_value,
    q12_messages_never_contain_the_payload,
    q12_bad_input_has_no_partial_effect,
    # Q17 periodic jobs
    q17_each_fire_time_is_enqueued_once_on_the_engines_clock,
    q17_concurrent_calls_enqueue_each_fire_time_once,
    q17_jobs_carry_the_schedule_and_fire_time_headers_and_stamps,
    q17_missed_fire_times_follow_catch_up,
    q17_a_changed_definition_wins_and_recomputes_the_next_fire_time,
    q17_undeclared_schedules_stop_firing_and_list_as_stale,
    q17_cron_on_dst_days_fires_once,
    q17_7_sub_hourly_cron_fires_at_every_real_instant_across_both_dst_changes,
    q17_bad_arguments_are_rejected_without_effect,
    q17_10_delete_periodic_deletes_one_row_and_keeps_its_jobs,
    q17_10_a_schedule_still_declared_comes_back_as_a_new_row,
    q17_10_delete_periodic_rejects_a_bad_name_without_effect,
    q15_a_held_key_creates_nothing_and_returns_the_live_job,
    q15_the_key_frees_when_its_job_is_acked_cancelled_or_dead,
    q15_enqueue_many_carries_a_key_per_job,
    q15_a_window_refuses_the_key_after_its_job_is_gone,
    q15_redrive_skips_dead_jobs_whose_key_is_live,
    q15_a_transaction_holds_its_keys_until_it_ends,
    q15_concurrent_enqueues_of_one_key_create_one_job,
    q15_unique_keys_are_validated_without_effect,
    d22_stats_counts_each_queue_by_state_at_one_instant,
    d23_ids_issued_minus_live_and_dead_counts_the_rows_gone,
    d24_requeue_dead_moves_listed_dead_rows_back_to_pending_with_attempts_reset,
    d24_requeue_dead_all_redrives_every_dead_row_of_the_queue_only,
    d24_requeue_dead_restarts_the_time_to_live,
    d24_requeue_dead_rejects_bad_arguments_without_effect,
    d25_purge_dead_deletes_dead_rows_older_than_the_limit,
    d25_1_purge_dead_by_ids_deletes_only_those_dead_rows,
    d29_purge_dead_dry_run_counts_what_purge_would_delete_and_deletes_nothing,
    d26_store_get_job_finds_a_row_by_id_in_any_queue,
    d26_list_jobs_pages_through_one_state_by_id,
    # D26.1: filtered listings.
    d26_1_find_jobs_by_key_matches_either_key_exactly,
    d26_1_find_jobs_by_header_matches_one_value_exactly,
    d26_1_a_header_scan_stops_after_its_bound_and_says_where,
    d26_1_bad_filters_raise_before_any_read,
    d27_stats_count_each_queues_acked_jobs,
    d27_stats_count_each_queues_dead_letter_moves,
    d27_stats_count_each_queues_cancelled_jobs,
    d27_stats_list_queues_with_counted_jobs_even_without_rows,
    d30_headers_are_kept_for_the_jobs_whole_life,
    d30_every_way_to_enqueue_takes_headers,
    d30_headers_are_validated_without_effect,
    # Q16 rescheduling and due times
    q16_reschedule_changes_a_pending_jobs_run_at_and_priority,
    q16_a_rescheduled_job_is_claimed_at_its_new_time_and_place,
    q16_reschedule_refuses_processing_dead_missing_and_other_queue_jobs,
    q16_reschedule_rejects_bad_arguments_without_effect,
    q16_every_wake_of_a_delayed_job_says_when_it_is_due,
    q16_reschedule_wakes_the_queue_with_the_new_due_time,
    q16_next_due_in_s_is_the_earliest_future_run_at_of_the_queue,
    # Q18: queue controls.
    q18_a_paused_queue_hands_out_no_job_until_resumed,
    q18_a_pause_leaves_enqueues_and_held_jobs_alone,
    q18_a_claim_on_a_paused_queue_still_sweeps,
    q18_resume_wakes_the_queue_and_pause_does_not,
    q18_stats_show_the_paused_state,
    # Q18.7-Q18.11: queue limits.
    q18_7_max_running_caps_the_live_leases_of_every_claim,
    q18_7_freed_slots_and_set_limits_wake_the_queue,
    q18_7_a_cancelling_job_holds_its_slot_until_settled_or_lapsed,
    # Q18.8: per-key concurrency.
    q18_8_the_concurrency_key_travels_with_the_job,
    q18_8_bad_concurrency_keys_raise_without_effect,
    q18_8_max_running_per_key_caps_each_keys_live_leases,
    q18_8_a_deep_backlog_does_not_starve_other_keys,
    q18_8_combines_with_max_running_and_counts_its_throttles,
    q18_8_next_due_waits_for_the_earliest_lease_of_the_full_keys,
    q18_9_the_rate_limit_is_a_token_bucket_on_the_engine_clock,
    q18_9_limits_combine_and_a_pause_still_wins,
    q18_10_stats_show_limits_and_count_throttled_claims,
    q18_11_set_limits_merges_and_limits_reads_them,
    q18_11_bad_limits_raise_and_change_nothing,
    # Q19.1-Q19.3: results, history and its purge.
    q19_1_a_kept_jobs_result_is_stored_with_its_ack,
    q19_1_an_unkept_jobs_result_is_discarded,
    q19_1_bad_results_raise_without_effect,
    q19_1_a_stale_claims_result_is_refused_with_its_ack,
    q19_1_results_go_with_the_fused_ack_of_a_limited_queue,
    q19_2_keep_completed_s_is_a_validated_stamp,
    q19_2_a_kept_job_is_readable_after_its_ack,
    q19_2_unkept_jobs_are_deleted_and_ack_batch_keeps,
    q19_2_list_jobs_pages_the_completed_rows,
    q19_2_list_jobs_rejects_unknown_states,
    q19_3_sweeps_purge_kept_rows_after_their_time,
    q19_3_a_purge_larger_than_one_batch_completes,
    # Q19.6: transactional completion.
    q19_6_complete_commits_with_the_transactions_enqueues,
    q19_6_a_stale_claim_raises_claim_lost_and_nothing_commits,
    q19_6_a_rolled_back_completion_leaves_the_claim,
    q19_6_bad_complete_arguments_raise_without_effect,
    # Q19.7: progress.
    q19_7_a_heartbeat_carries_progress_that_get_job_shows,
    q19_7_progress_is_kept_into_history_and_dead_rows,
    q19_7_a_refused_heartbeat_stores_no_progress,
    q19_7_progress_is_validated_without_effect,
    q19_4_wait_returns_a_job_already_final_at_once,
    q19_4_wait_is_woken_by_every_operation_that_finalizes,
    q19_4_wait_raises_job_gone_naming_keep_completed_s,
    q19_4_bad_arguments_raise_without_effect,
    q19_4_wait_is_cancellable_and_a_pure_read,
    # Q19.8: claim tokens and release.
    q19_8_every_claim_of_a_job_gets_a_new_token,
    q19_8_v_refuses_a_token_that_is_not_the_claims,
    q19_8_a_redriven_job_refuses_its_old_holders,
    q19_8_release_gives_the_claims_attempt_back,
    q19_8_bad_release_arguments_raise_without_effect,
    q19_8_a_released_kept_job_is_pending_and_its_next_claim_keeps_it,
    # Q21: the worker registry.
    q21_a_start_registers_a_running_row_on_the_engines_clock,
    q21_beats_stamp_the_heartbeat_and_a_start_starts_afresh,
    q21_a_stop_marks_the_row_stopped_and_a_missing_row_stays_missing,
    q21_a_silent_row_reads_gone_after_gone_after_s,
    q21_the_listing_puts_the_latest_beat_first_and_takes_limit,
    q21_starts_and_beats_purge_rows_unheard_of_for_a_day_in_batches,
    q21_bad_arguments_are_rejected_without_effect,
)


async def check_conformance(harness: EngineHarness, *, only: Iterable[str] | None = None) -> None:
    """Run the conformance suite against one engine and report every failure at once.

    Example::

        await check_conformance(MemoryHarness())

    Args:
        harness: Opens fresh stores of the engine under test and moves its clock.
        only: Names of the checks to run (see :data:`CONFORMANCE_CHECKS`); default all.

    Raises:
        AssertionError: one or more checks failed; the message lists each failing check's
            name with its reason.
        ValueError: ``only`` names a check that does not exist.
    """
    checks = _select(only)
    failures: list[str] = []
    for check in checks:
        try:
            await check(harness)
        except AssertionError as exc:
            failures.append(f"{check.__name__}: {exc}")
        except Exception as exc:
            leaves = _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
            described = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
            failures.append(f"{check.__name__}: unexpected {described}")
    if failures:
        header = (
            f"engine {harness.name!r} failed {len(failures)} of {len(checks)} conformance checks:"
        )
        raise AssertionError("\n".join([header, *(f"- {f}" for f in failures)]))


def _select(only: Iterable[str] | None) -> list[Check]:
    if only is None:
        return list(CONFORMANCE_CHECKS)
    if isinstance(only, str):
        raise ValueError(f"only must be an iterable of check names, not the str {only!r}")
    by_name = {check.__name__: check for check in CONFORMANCE_CHECKS}
    wanted = list(dict.fromkeys(only))
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise ValueError(f"only names unknown conformance checks: {unknown}")
    return [by_name[name] for name in wanted]
