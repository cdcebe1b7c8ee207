//! Oracle scenario files parsed into decision inputs.
