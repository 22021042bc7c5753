"""What the model sees and says: the prompt protocols, the chat messages of a turn, and the
protocol and history a base model was trained with.

:mod:`~agent.protocol.formats` holds the named, versioned protocols (``tuple/v1``, ``keyword/v1``):
turn texts and reply parsers; :mod:`~agent.protocol.messages` the messages and the
:class:`HistoryPolicy` (which earlier turns are sent again); :mod:`~agent.protocol.profiles` the
:class:`AgentProfile` of a base model. Pure, built on :mod:`agent.maze` only.
"""

from agent.protocol.formats import KEYWORD, PROTOCOLS, TUPLE, Protocol, get_protocol, protocol_corpus
from agent.protocol.messages import HistoryPolicy, Message, assistant_message, user_message
from agent.protocol.profiles import DEFAULT_PROFILE, PROFILE_FILE, AgentProfile, load_profile, profile_data

__all__ = [
    "DEFAULT_PROFILE",
    "KEYWORD",
    "PROFILE_FILE",
    "PROTOCOLS",
    "TUPLE",
    "AgentProfile",
    "HistoryPolicy",
    "Message",
    "Protocol",
    "assistant_message",
    "get_protocol",
    "load_profile",
    "profile_data",
    "protocol_corpus",
    "user_message",
]
