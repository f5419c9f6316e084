//! Families read when scraped, from figures another part keeps itself (the workers' loads,
//! the store's key counts, the outcome counters): the part registers a reader with
//! [`super::Metrics::scrape`] and the reader writes its families through [`Scrape`].

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// A reader registered with [`super::Metrics::scrape`].
pub(super) type Reader = Box<dyn Fn(&mut Scrape<'_>) + Send + Sync>;

/// The families of one reader, written as the reader names them.
///
/// Names are the exposed names; a counter's ends in `_total` (the encoder appends that
/// suffix itself, so it is taken off before the name is handed over). Writing into the
/// exposition text does not fail, so the methods return nothing; the first error, if any,
/// ends the scrape.
pub struct Scrape<'a> {
    encoder: DescriptorEncoder<'a>,
    result: fmt::Result,
}

/// The name a counter is handed to the encoder under: its exposed name without `_total`.
pub(super) fn counter_base(exposed: &'static str) -> &'static str {
    debug_assert!(
        exposed.ends_with("_total"),
        "counter {exposed} without _total"
    );
    exposed.strip_suffix("_total").unwrap_or(exposed)
}

impl Scrape<'_> {
    /// A counter without labels.
    pub fn counter(&mut self, name: &'static str, help: &str, value: u64) {
        self.family(name, help, MetricType::Counter, |e| {
            e.encode_counter::<NoLabelSet, _, u64>(&value, None)
        });
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &'static str, help: &str, value: i64) {
        self.family(name, help, MetricType::Gauge, |e| e.encode_gauge(&value));
    }

    /// A counter family with one label: one sample per `(label value, value)`.
    pub fn counters<V: AsRef<str>>(
        &mut self,
        name: &'static str,
        help: &str,
        label: &'static str,
        samples: impl IntoIterator<Item = (V, u64)>,
    ) {
        self.family(name, help, MetricType::Counter, |e| {
            for (v, n) in samples {
                let labels = [(label, v.as_ref())];
                e.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
            Ok(())
        });
    }

    /// A gauge family with one label: one sample per `(label value, value)`.
    pub fn gauges<V: AsRef<str>, N: EncodeGaugeValue>(
        &mut self,
        name: &'static str,
        help: &str,
        label: &'static str,
        samples: impl IntoIterator<Item = (V, N)>,
    ) {
        self.family(name, help, MetricType::Gauge, |e| {
            for (v, n) in samples {
                let labels = [(label, v.as_ref())];
                e.encode_family(&labels)?.encode_gauge(&n)?;
            }
            Ok(())
        });
    }

    fn family(
        &mut self,
        name: &'static str,
        help: &str,
        kind: MetricType,
        samples: impl FnOnce(&mut MetricEncoder<'_>) -> fmt::Result,
    ) {
        if self.result.is_err() {
            return;
        }
        let name = match kind {
            MetricType::Counter => counter_base(name),
            _ => name,
        };
        self.result = self
            .encoder
            .encode_descriptor(name, help, None, kind)
            .and_then(|mut e| samples(&mut e));
    }
}

/// The registry's side of a reader.
pub(super) struct ReaderCollector(pub(super) Reader);

impl fmt::Debug for ReaderCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReaderCollector")
    }
}

impl Collector for ReaderCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut scrape = Scrape {
            encoder,
            result: Ok(()),
        };
        (self.0)(&mut scrape);
        scrape.result
    }
}
