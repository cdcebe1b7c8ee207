//! `<sound>`: ich9 (default) or ac97.

use super::Configurator;
use crate::domain::{Alias, Domain, SoundCard};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the sound card.
pub struct Sound;

impl Configurator for Sound {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let Some(sound) = &vmi.spec.domain.devices.sound else {
            return Ok(());
        };
        let model = match sound.model.as_deref().unwrap_or("") {
            "" | "ich9" => "ich9",
            "ac97" => "ac97",
            other => {
                return Err(ConvertError::new(
                    "spec.domain.devices.sound.model",
                    format!("invalid model: {other}"),
                ));
            }
        };
        domain.devices.sounds = vec![SoundCard {
            alias: Some(Alias::user(&sound.name)),
            model: model.into(),
        }];
        Ok(())
    }
}
