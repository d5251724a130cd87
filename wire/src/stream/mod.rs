//! Response streams: parse each wire into normalized events; re-emit client-visible events.
