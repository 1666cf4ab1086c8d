import pytest


@pytest.fixture(scope="module")
def api(smol_pair):
    """The API served in-process over the session's demo pair."""
    from support.api_inproc import Served

    served = Served(smol_pair)
    yield served
    served.close()
