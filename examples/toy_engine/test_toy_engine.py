"""Certify the toy engine in a test: schedspec's pytest plugin provides the fixture."""


def test_toy_engine_conforms(schedspec_certify):
    schedspec_certify("toy_engine:make", workloads=50)
