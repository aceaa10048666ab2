"""Q1-Q10 on PostgreSQL: the engine agrees with the reference model, on both drivers.

Each example opens a throwaway schema with a frozen database clock (``PostgresHarness``),
so fewer examples run here than on the in-memory engine; the steps are the same.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
from _figures import run_counting_examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alkstore_trio.testing import check_engine_against_model

STEPS = 40


@pytest.mark.parametrize("driver", ["native", "thread"])
def test_q1_q10_postgres_engine_agrees_with_the_reference_model(pg_dsn, driver, figures):
    from alkstore_trio.testing._postgres import PostgresHarness

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def agree(data: st.DataObject) -> None:
        harness = PostgresHarness(pg_dsn, driver=driver)
        trio.run(partial(check_engine_against_model, harness, data, steps=STEPS))

    figures.record(examples=run_counting_examples(agree), steps_per_example=STEPS)
