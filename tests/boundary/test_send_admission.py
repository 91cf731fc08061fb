"""The bound on unary sends a broker holds at once (``broker/send_admission.py``): producers sending faster than
the disk took a broker past 1 GiB (the overload review); past the bound a send is refused at once, stored nowhere."""

from broker.send_admission import SendAdmission


def test_sends_past_the_bound_are_refused_until_those_in_progress_are_answered():
    admission = SendAdmission(limit=10)
    with admission.admitted(6, None) as first:
        assert first is None and admission.in_flight == 6
        with admission.admitted(4, 5.0) as second:
            assert second is None and admission.in_flight == 10
            with admission.admitted(1, 5.0) as third:
                assert third is not None and "broker busy" in third and "not stored" in third
        with admission.admitted(4, 5.0) as again:
            assert again is None
    assert admission.in_flight == 0 and admission.refused == 1
    with admission.admitted(50, None) as alone:  # one larger than the bound still goes when nothing else does
        assert alone is None


def test_a_send_whose_deadline_passed_is_not_stored():
    admission = SendAdmission(limit=10)
    with admission.admitted(1, 0.0) as late:
        assert late is not None and "deadline passed" in late
    assert admission.in_flight == 0 and admission.refused == 1
